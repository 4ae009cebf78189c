// Messages, errors and ints: what every other unit of the execute core uses.
#include "core.h"

namespace hipdnn_core {

Config g;

std::string list_str(const int64_t* v, size_t n) {
    std::string s = "[";
    for (size_t i = 0; i < n; ++i) {
        if (i) s += ", ";
        s += std::to_string(v[i]);
    }
    return s + "]";
}

std::string list_str(const std::vector<int64_t>& v) { return list_str(v.data(), v.size()); }

std::string py_repr(PyObject* o) {
    PyObject* r = PyObject_Repr(o);
    if (!r) {
        PyErr_Clear();
        return "<unrepresentable>";
    }
    const char* c = PyUnicode_AsUTF8(r);
    std::string s = c ? c : "<unrepresentable>";
    if (!c) PyErr_Clear();
    Py_DECREF(r);
    return s;
}

std::string py_str(PyObject* o) {
    PyObject* r = PyObject_Str(o);
    if (!r) {
        PyErr_Clear();
        return "<unprintable>";
    }
    const char* c = PyUnicode_AsUTF8(r);
    std::string s = c ? c : "<unprintable>";
    if (!c) PyErr_Clear();
    Py_DECREF(r);
    return s.size() > 200 ? s.substr(0, 197) + "..." : s;
}

std::string quoted(const std::string& s) {
    PyObject* u = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
    if (!u) {
        PyErr_Clear();
        return "'" + s + "'";
    }
    std::string r = py_repr(u);
    Py_DECREF(u);
    return r;
}

std::nullptr_t raise(int code, const std::string& message) {
    PyObject* key = PyLong_FromLong(code);
    PyObject* code_obj = (g.error_codes && key) ? PyDict_GetItemWithError(g.error_codes, key) : nullptr;
    Py_XDECREF(key);
    if (!code_obj || !g.error_type) {
        PyErr_SetString(PyExc_RuntimeError, message.c_str());
        return nullptr;
    }
    PyObject* msg = PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "replace");
    if (!msg) return nullptr;
    PyObject* exc = PyObject_CallFunctionObjArgs(g.error_type, code_obj, msg, nullptr);
    Py_DECREF(msg);
    if (!exc) return nullptr;
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc)), exc);
    Py_DECREF(exc);
    return nullptr;
}

// raise(), keeping the exception pending now (a caller's object failed) as the new error's __cause__.
std::nullptr_t raise_chained(int code, const std::string& message) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (type) {
        PyErr_NormalizeException(&type, &value, &tb);
        if (tb && value) PyException_SetTraceback(value, tb);
    }
    std::string full = message;
    if (value) full += " (" + std::string(reinterpret_cast<PyTypeObject*>(type)->tp_name) + ": " + py_str(value) + ")";
    raise(code, full);
    if (value) {
        PyObject *t2, *v2, *tb2;
        PyErr_Fetch(&t2, &v2, &tb2);
        PyErr_NormalizeException(&t2, &v2, &tb2);
        if (v2) {
            Py_INCREF(value);
            PyException_SetCause(v2, value);  // steals the reference
            Py_INCREF(value);
            PyException_SetContext(v2, value);  // steals the reference
        }
        PyErr_Restore(t2, v2, tb2);
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return nullptr;
}

std::string dtype_name(int dt) {
    if (dt >= 0 && static_cast<size_t>(dt) < g.dtype_names.size()) return g.dtype_names[static_cast<size_t>(dt)];
    return "DataType(" + std::to_string(dt) + ")";
}

int itemsize_of(int dt) {
    if (dt >= 0 && static_cast<size_t>(dt) < g.itemsizes.size()) return g.itemsizes[static_cast<size_t>(dt)];
    return 0;
}

// A Python int (not bool) or numpy integer -> int64. Returns false with a HipdnnError set.
bool to_int64(PyObject* o, int64_t* out, const char* what_prefix, const std::string& what) {
    if (PyLong_CheckExact(o) || (PyLong_Check(o) && !PyBool_Check(o))) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow) {
            raise(kInvalidValue, std::string(what_prefix) + what + " holds " + py_repr(o) + ", outside the int64 range");
            return false;
        }
        if (v == -1 && PyErr_Occurred()) return false;
        *out = v;
        return true;
    }
    if (!PyBool_Check(o) && PyIndex_Check(o)) {
        PyObject* idx = PyNumber_Index(o);
        if (!idx) {
            raise_chained(kInvalidValue, std::string(what_prefix) + what + " holds " + py_repr(o) +
                                             ", whose __index__ failed");
            return false;
        } else {
            bool ok = to_int64(idx, out, what_prefix, what);
            Py_DECREF(idx);
            return ok;
        }
    }
    raise(kInvalidValue, std::string(what_prefix) + what + " must hold ints, got " + py_repr(o));
    return false;
}

// A list or tuple holding only exact ints, read without running any Python code (so nothing can
// change it under us). False, with nothing raised, when `seq` is anything else or an int leaves
// int64: the caller then takes the general path.
bool read_exact_int_items(PyObject* const* items, Py_ssize_t n, int64_t* out) {
    for (Py_ssize_t k = 0; k < n; ++k) {
        if (!PyLong_CheckExact(items[k])) return false;
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(items[k], &overflow);
        if (overflow) return false;
        out[k] = v;
    }
    return true;
}

bool read_exact_ints(PyObject* seq, std::vector<int64_t>& out) {
    if (!PyList_CheckExact(seq) && !PyTuple_CheckExact(seq)) return false;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    out.resize(static_cast<size_t>(n));
    return read_exact_int_items(PySequence_Fast_ITEMS(seq), n, out.data());
}

// A private snapshot of a sequence: a tuple holding strong references, so that Python code run
// while its items are read (an item's __index__, a tensor's get_name) cannot free or move them.
// Strings and bytes are refused: they are sequences, but never of ints or entries. Lists and tuples
// are copied whole; anything else is iterated, at most kMaxSnapshotItems items (an endless iterator
// grew memory until the process ran out, and a length hint is the object's own word).
PyObject* snapshot(PyObject* seq, const std::string& what, const char* of, int code) {
    if (PyUnicode_Check(seq) || PyBytes_Check(seq) || PyByteArray_Check(seq)) {
        raise(code, what + " must be a sequence of " + of + ", got " + py_repr(seq));
        return nullptr;
    }
    if (PyList_CheckExact(seq) || PyTuple_CheckExact(seq)) {
        PyObject* t = PySequence_Tuple(seq);
        if (!t) raise_chained(code, what + " must be a sequence of " + of + ", got " + py_repr(seq));
        return t;
    }
    PyObject* it = PyObject_GetIter(seq);
    if (!it) {
        raise_chained(code, what + " must be a sequence of " + of + ", got " + py_repr(seq));
        return nullptr;
    }
    PyObject* items = PyList_New(0);
    while (items) {
        PyObject* item = PyIter_Next(it);
        if (!item) break;
        if (PyList_GET_SIZE(items) >= kMaxSnapshotItems) {
            Py_DECREF(item);
            Py_CLEAR(items);
            raise(code, what + " has more than " + std::to_string(kMaxSnapshotItems) + " items");
            break;
        }
        if (PyList_Append(items, item) != 0) Py_CLEAR(items);
        Py_DECREF(item);
    }
    Py_DECREF(it);
    if (items && PyErr_Occurred()) Py_CLEAR(items);
    if (!items) {
        if (!is_hipdnn_error_pending())
            raise_chained(code, what + " must be a sequence of " + of + ", got " + py_repr(seq));
        return nullptr;
    }
    PyObject* t = PyList_AsTuple(items);
    Py_DECREF(items);
    return t;
}

// Read a sequence of ints into `out`. Returns false with HipdnnError set.
bool read_ints(PyObject* seq, std::vector<int64_t>& out, const std::string& what) {
    if (read_exact_ints(seq, out)) return true;
    PyObject* t = snapshot(seq, what, "ints", kInvalidValue);
    if (!t) return false;
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    out.resize(static_cast<size_t>(n));
    bool ok = true;
    for (Py_ssize_t i = 0; ok && i < n; ++i) ok = to_int64(PyTuple_GET_ITEM(t, i), &out[static_cast<size_t>(i)], "", what);
    Py_DECREF(t);
    return ok;
}

bool is_hipdnn_error_pending() {
    return g.error_type && PyErr_Occurred() && PyErr_ExceptionMatches(g.error_type);
}

bool as_hipdnn_error(int code, const std::string& message) {
    if (!PyErr_Occurred() || is_hipdnn_error_pending()) return false;
    // Interrupts and exhausted memory are the process's business, not a refusal of the input.
    if (!PyErr_ExceptionMatches(PyExc_Exception) || PyErr_ExceptionMatches(PyExc_MemoryError)) return false;
    raise_chained(code, message);
    return false;
}

}  // namespace hipdnn_core
