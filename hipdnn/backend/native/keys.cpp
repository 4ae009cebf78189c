// Variant-pack and override keys: tensor objects (by identity) or uids.
#include "core.h"

namespace hipdnn_core {

bool resolve_key_fast(const ExecutorData& x, PyObject* key, int64_t* uid, int* index, PyObject** tensor_key) {
    const PlanData& d = *x.plan->d;
    auto it = x.by_key.find(key);
    if (it != x.by_key.end()) {
        *index = it->second;
        *uid = d.tensors[static_cast<size_t>(it->second)].uid;
        *tensor_key = key;
        return true;
    }
    if (!PyLong_CheckExact(key)) return false;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(key, &overflow);
    if (overflow) return false;
    *uid = v;
    auto u = d.by_uid.find(v);
    *index = u == d.by_uid.end() ? -1 : u->second;
    *tensor_key = nullptr;
    return true;
}

// Key of an override or variant-pack entry -> (uid, tensor index or -1). Returns false with error.
bool resolve_key(const ExecutorData& x, PyObject* key, KeyUse use, int64_t* uid, int* index, PyObject** tensor_key) {
    const PlanData& d = *x.plan->d;
    *tensor_key = nullptr;
    auto it = x.by_key.find(key);
    if (it != x.by_key.end()) {
        *index = it->second;
        *uid = d.tensors[static_cast<size_t>(it->second)].uid;
        *tensor_key = key;
        return true;
    }
    if (g.tensor_type && PyObject_TypeCheck(key, reinterpret_cast<PyTypeObject*>(g.tensor_type))) {
        PyObject* nm = PyObject_CallMethodNoArgs(key, g.str_name);
        std::string name = nm ? py_repr(nm) : "?";
        Py_XDECREF(nm);
        PyErr_Clear();
        if (use == KeyUse::kVariantPack) {
            raise(kInvalidVariantPack, "variant pack key " + name + " is not a tensor of this graph");
            return false;
        }
        if (use == KeyUse::kBind) {
            raise(kInvalidValue, "bind: tensor " + name + " is not a tensor of this graph");
            return false;
        }
        PyObject* u = PyObject_CallMethodNoArgs(key, g.str_uid);
        if (!u || u == Py_None) {
            Py_XDECREF(u);
            PyErr_Clear();
            raise(kInvalidValue, "override key tensor " + name + " has no uid (validate the graph first)");
            return false;
        }
        int64_t v = 0;
        bool ok = to_int64(u, &v, "", "override key tensor " + name + ": its get_uid()");
        Py_DECREF(u);
        if (!ok) return false;
        *uid = v;
        *index = -1;
        *tensor_key = key;  // rule 3 names it as another graph's tensor
        return true;
    }
    if (PyLong_Check(key) && !PyBool_Check(key)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(key, &overflow);
        if (overflow) {
            raise(use == KeyUse::kVariantPack ? kInvalidVariantPack : kInvalidValue,
                  (use == KeyUse::kVariantPack ? "variant pack uid " : "rule 3 (unknown uid): uid ") + py_repr(key) +
                      " is not a tensor of this graph");
            return false;
        }
        *uid = v;
        auto u = d.by_uid.find(v);
        *index = u == d.by_uid.end() ? -1 : u->second;
        return true;
    }
    if (use == KeyUse::kOverride && !PyBool_Check(key) && PyIndex_Check(key)) {
        PyObject* idx = PyNumber_Index(key);
        if (idx) {
            bool ok = resolve_key(x, idx, use, uid, index, tensor_key);
            Py_DECREF(idx);
            return ok;
        }
        PyErr_Clear();
    }
    if (use == KeyUse::kVariantPack) {
        raise(kInvalidVariantPack, "variant pack key " + py_repr(key) + " is neither a tensor nor a uid");
    } else if (use == KeyUse::kBind) {
        raise(kInvalidValue, "bind: " + py_repr(key) + " is neither a tensor nor a uid");
    } else {
        raise(kInvalidValue, "override key " + py_repr(key) + " is neither a tensor nor a uid");
    }
    return false;
}

bool is_mapping(PyObject* o) {
    if (PyDict_Check(o)) return true;
    if (PyList_Check(o) || PyTuple_Check(o) || !g.mapping_abc) return false;
    int r = PyObject_IsInstance(o, g.mapping_abc);
    if (r < 0) PyErr_Clear();
    return r == 1;
}

}  // namespace hipdnn_core
