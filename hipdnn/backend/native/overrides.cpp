// Lowering the overrides (map and parallel forms) and rules 1-8 of spec 4.2.1.
#include "core.h"

#include <unordered_set>

namespace hipdnn_core {

// Rules 4-8 of spec 4.2.1 for one entry (rules 2-3 are the caller's), plus, for the bound path where
// pointers are trusted to back the declared maximum, the memory bound. An output (`output`) must
// also address each element once: rule 8 leaves its axes in the declared order, which makes that a
// single pass. `elements`, when given, receives the elements the override addresses (bound path).
// Messages are the API's.
bool check_entry(const TensorSpec& t, int64_t uid, const int64_t* shape, size_t shape_n,
                 const int64_t* stride, size_t stride_n, bool bound_to_declared, bool output,
                 int64_t* elements) {
    size_t rank = t.rank();
    if (shape_n != rank || stride_n != rank) {
        raise(kInvalidValue, "rule 4 (rank mismatch): " + t.label + " has rank " + std::to_string(rank) +
                                 ", override gives " + std::to_string(shape_n) + " dims and " +
                                 std::to_string(stride_n) + " strides");
        return false;
    }
    for (size_t i = 0; i < rank; ++i) {
        if (shape[i] <= 0) {
            raise(kInvalidValue, "rule 5 (positive shape): uid " + std::to_string(uid) + " override shape " +
                                     list_str(shape, rank) + " has a value <= 0");
            return false;
        }
    }
    for (size_t i = 0; i < rank; ++i) {
        if (stride[i] <= 0) {
            raise(kInvalidValue, "rule 6 (positive stride): uid " + std::to_string(uid) + " override stride " +
                                     list_str(stride, rank) + " has a value <= 0");
            return false;
        }
    }
    for (size_t i = 0; i < rank; ++i) {
        if (t.dims[i] != -1 && shape[i] > t.dims[i]) {
            raise(kInvalidValue, "rule 7 (max shape exceeded): uid " + std::to_string(uid) + " override shape " +
                                     list_str(shape, rank) + " exceeds the declared maximum " + list_str(t.dims) +
                                     " at axis " + std::to_string(i));
            return false;
        }
    }
    int64_t previous = INT64_MAX;
    for (int axis : t.outer_first) {
        if (shape[axis] == 1) continue;
        if (stride[axis] > previous) {
            raise(kInvalidValue, "rule 8 (stride order): uid " + std::to_string(uid) + " override strides " +
                                     list_str(stride, rank) + " reorder the declared layout " + list_str(t.strides));
            return false;
        }
        previous = stride[axis];
    }
    if (output && layout_overlaps(shape, stride, t.outer_first.data(), rank)) {
        raise(kInvalidValue, "uid " + std::to_string(uid) + " (" + quoted(t.name) + ") override shape " +
                                 list_str(shape, rank) + " with strides " + list_str(stride, rank) +
                                 " maps distinct elements to one address; a node writes this tensor, so each "
                                 "element needs its own memory");
        return false;
    }
    if (bound_to_declared) {
        int64_t elems = 0;
        if (!addressed_elements(shape, stride, rank, &elems)) {
            raise(kInvalidValue, "rule 7 (max shape exceeded): uid " + std::to_string(uid) + " override shape " +
                                     list_str(shape, rank) + " with strides " + list_str(stride, rank) +
                                     " addresses more elements than int64 can count");
            return false;
        }
        if (t.max_elements >= 0 && elems > t.max_elements) {
            raise(kInvalidValue, "rule 7 (max shape exceeded): uid " + std::to_string(uid) + " override shape " +
                                     list_str(shape, rank) + " with strides " + list_str(stride, rank) + " addresses " +
                                     std::to_string(elems) + " elements, more than the " +
                                     std::to_string(t.max_elements) + " its declared maximum " + list_str(t.dims) +
                                     " with strides " + list_str(t.strides) +
                                     " addresses (a bound call trusts its pointers to that much memory)");
            return false;
        }
        if (elements) *elements = elems;
    }
    return true;
}
// Override rules 2-8 of an already lowered set, against the plan's tensors (rule 3: unknown or
// virtual uids). `bound` adds the memory bound of the bound path; `is_output` (by tensor index, or
// null when unknown) marks the tensors nodes write, whose override layouts must not overlap.
// Linear in the number of entries: duplicates are found through a flag per tensor (and a set for
// uids the plan does not know, which only an erroneous call holds).
bool check_overrides(const PlanData& d, OverrideSet& o, bool bound, const uint8_t* is_output) {
    SmallVec<uint8_t, 64> seen(d.tensors.size());
    std::fill(seen.data(), seen.data() + seen.size(), uint8_t{0});
    std::unique_ptr<std::unordered_set<int64_t>> unknown;
    for (size_t i = 0; i < o.size(); ++i) {
        bool again;
        if (o.index[i] >= 0) {
            uint8_t& flag = seen[static_cast<size_t>(o.index[i])];
            again = flag != 0;
            flag = 1;
        } else {
            if (!unknown) unknown.reset(new std::unordered_set<int64_t>());
            again = !unknown->insert(o.uids[i]).second;
        }
        if (again) {
            raise(kInvalidValue, "rule 2 (duplicate uids): uid " + std::to_string(o.uids[i]) +
                                     " is overridden more than once (a tensor and its uid both count as that uid)");
            return false;
        }
    }
    for (size_t i = 0; i < o.size(); ++i) {
        int64_t uid = o.uids[i];
        int idx = o.index[i];
        if (idx < 0) {
            if (o.keys[i]) {
                PyObject* nm = PyObject_CallMethodNoArgs(o.keys[i], g.str_name);
                std::string name = nm ? py_repr(nm) : "?";
                Py_XDECREF(nm);
                PyErr_Clear();
                raise(kInvalidValue, "rule 3 (unknown uid): tensor " + name + " (uid " + std::to_string(uid) +
                                         ") belongs to another graph");
            } else {
                raise(kInvalidValue, "rule 3 (unknown uid): uid " + std::to_string(uid) + " is not a tensor of this graph");
            }
            return false;
        }
        const TensorSpec& t = d.tensors[static_cast<size_t>(idx)];
        if (t.is_virtual) {
            raise(kInvalidValue, "rule 3 (unknown uid): uid " + std::to_string(uid) + " (" + quoted(t.name) +
                                     ") is virtual; its shape follows from its inputs and cannot be overridden");
            return false;
        }
        if (!check_entry(t, uid, o.shapes[i].data(), o.shapes[i].size(), o.strides[i].data(),
                         o.strides[i].size(), bound, is_output && is_output[idx]))
            return false;
    }
    return true;
}

// More entries than the graph has tensors to override must repeat or name foreign ones: refused
// before any of them is read, so that a million entries cost nothing.
bool check_override_count(const PlanData& d, size_t count, const char* what) {
    if (count <= d.overridable) return true;
    raise(kInvalidValue, std::to_string(count) + " " + what + " given, but graph " + quoted(d.graph_name) + " has " +
                             std::to_string(d.overridable) + " tensor(s) that can be overridden");
    return false;
}

namespace {

// One (key, OverrideEntry) pair of the map form into entry i of `o`.
bool lower_entry(const ExecutorData& x, PyObject* key, PyObject* entry, OverrideSet& o, size_t i) {
    if (g.entry_type && !PyObject_TypeCheck(entry, reinterpret_cast<PyTypeObject*>(g.entry_type))) {
        raise(kInvalidValue, "override for " + py_repr(key) + " must be an OverrideEntry, got " +
                                 Py_TYPE(entry)->tp_name);
        return false;
    }
    int64_t uid;
    int index;
    PyObject* tkey;
    if (!resolve_key(x, key, KeyUse::kOverride, &uid, &index, &tkey)) return false;
    o.uids[i] = uid;
    o.index[i] = index;
    o.hold_key(i, tkey);
    PyObject* shape = PyObject_GetAttr(entry, g.str_shape);
    PyObject* stride = shape ? PyObject_GetAttr(entry, g.str_stride) : nullptr;
    bool ok = shape && stride;
    if (!ok)
        raise_chained(kInvalidValue, "override for uid " + std::to_string(uid) + ": cannot read its " +
                                         (shape ? "stride" : "shape"));
    ok = ok && read_ints(shape, o.shapes[i], "override shape of uid " + std::to_string(uid)) &&
         read_ints(stride, o.strides[i], "override stride of uid " + std::to_string(uid));
    Py_XDECREF(shape);
    Py_XDECREF(stride);
    return ok;
}

// The map form. The pairs are copied (with strong references) before any of them is looked at:
// Python code runs while they are read (an entry's attributes, a key's __index__) and may change
// the mapping, or the list its items() returned.
bool lower_map(const ExecutorData& x, PyObject* map, OverrideSet& o) {
    const PlanData& d = *x.plan->d;
    if (!is_mapping(map)) {
        raise(kInvalidValue, "overrides must be a mapping {tensor or uid: OverrideEntry}");
        return false;
    }
    if (PyDict_Check(map)) {
        Py_ssize_t n = PyDict_GET_SIZE(map);
        if (!check_override_count(d, static_cast<size_t>(n), "overrides")) return false;
        SmallVec<PyObject*, 32> pairs(2 * static_cast<size_t>(n));
        Py_ssize_t pos = 0, k = 0;
        PyObject *key, *value;
        while (k < n && PyDict_Next(map, &pos, &key, &value)) {  // runs no Python code
            Py_INCREF(key);
            Py_INCREF(value);
            pairs[2 * static_cast<size_t>(k)] = key;
            pairs[2 * static_cast<size_t>(k) + 1] = value;
            ++k;
        }
        o.reset(static_cast<size_t>(k));
        bool ok = true;
        for (Py_ssize_t i = 0; ok && i < k; ++i)
            ok = lower_entry(x, pairs[2 * static_cast<size_t>(i)], pairs[2 * static_cast<size_t>(i) + 1], o,
                             static_cast<size_t>(i));
        for (size_t i = 0; i < 2 * static_cast<size_t>(k); ++i) Py_DECREF(pairs[i]);
        return ok;
    }
    PyObject* listed = PyMapping_Items(map);
    if (!listed) return raise_chained(kInvalidValue, "cannot read the overrides mapping's items"), false;
    PyObject* items = PySequence_Tuple(listed);  // our own copy: the list may be the mapping's
    Py_DECREF(listed);
    if (!items) return raise_chained(kInvalidValue, "cannot read the overrides mapping's items"), false;
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    bool ok = check_override_count(d, static_cast<size_t>(n), "overrides");
    if (ok) o.reset(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; ok && i < n; ++i) {
        PyObject* kv = PyTuple_GET_ITEM(items, i);
        if (!PyTuple_Check(kv) || PyTuple_GET_SIZE(kv) != 2) {
            raise(kInvalidValue, "the overrides mapping's items() yielded " + py_repr(kv) +
                                     ", not a (key, OverrideEntry) pair");
            ok = false;
            break;
        }
        ok = lower_entry(x, PyTuple_GET_ITEM(kv, 0), PyTuple_GET_ITEM(kv, 1), o, static_cast<size_t>(i));
    }
    Py_DECREF(items);
    return ok;
}

// The parallel form without running Python code: lists or tuples of keys the core knows and of
// exact ints. False (nothing raised) when anything else is met; the caller then reads snapshots.
bool lower_parallel_fast(const ExecutorData& x, PyObject* uids, PyObject* shapes, PyObject* strides, OverrideSet& o) {
    PyObject* seqs[3] = {uids, shapes, strides};
    for (PyObject* s : seqs)
        if (!PyList_CheckExact(s) && !PyTuple_CheckExact(s)) return false;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(uids);
    if (PySequence_Fast_GET_SIZE(shapes) != n || PySequence_Fast_GET_SIZE(strides) != n) return false;
    if (static_cast<size_t>(n) > x.plan->d->overridable) return false;
    o.reset(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
        size_t k = static_cast<size_t>(i);
        PyObject* tkey = nullptr;
        if (!resolve_key_fast(x, PySequence_Fast_GET_ITEM(uids, i), &o.uids[k], &o.index[k], &tkey) ||
            !read_exact_ints(PySequence_Fast_GET_ITEM(shapes, i), o.shapes[k]) ||
            !read_exact_ints(PySequence_Fast_GET_ITEM(strides, i), o.strides[k]))
            return false;
        o.hold_key(k, tkey);
    }
    return true;
}

}  // namespace

// Lower either call form (spec 4.2) into `o`. Rule 1 is checked here: only the parallel form can break it.
bool lower_overrides(const ExecutorData& x, PyObject* o_uids, PyObject* o_shapes, PyObject* o_strides, PyObject* map,
                     OverrideSet& o) {
    o.clear();
    bool parallel = o_uids != Py_None || o_shapes != Py_None || o_strides != Py_None;
    if (map != Py_None && parallel) {
        raise(kInvalidValue, "pass overrides either as override_uids/shapes/strides or as overrides={...}, not both");
        return false;
    }
    if (map != Py_None) return lower_map(x, map, o);
    if (!parallel) return true;
    if (o_uids != Py_None && o_shapes != Py_None && o_strides != Py_None &&
        lower_parallel_fast(x, o_uids, o_shapes, o_strides, o))
        return true;
    o.clear();
    // The general path reads private snapshots of the three sequences.
    PyObject* seqs[3] = {o_uids, o_shapes, o_strides};
    PyObject* snap[3] = {nullptr, nullptr, nullptr};
    const char* what[3] = {"override_uids", "override_shapes", "override_strides"};
    const char* of[3] = {"tensors or uids", "int sequences", "int sequences"};
    bool ok = true;
    for (int i = 0; i < 3 && ok; ++i) {
        if (seqs[i] == Py_None) continue;
        snap[i] = snapshot(seqs[i], what[i], of[i], kInvalidValue);
        ok = snap[i] != nullptr;
    }
    Py_ssize_t n[3];
    for (int i = 0; i < 3; ++i) n[i] = snap[i] ? PyTuple_GET_SIZE(snap[i]) : 0;
    if (ok && !(n[0] == n[1] && n[1] == n[2])) {
        raise(kInvalidValue, "rule 1 (length consistency): " + std::to_string(n[0]) + " override_uids, " +
                                 std::to_string(n[1]) + " override_shapes, " + std::to_string(n[2]) +
                                 " override_strides");
        ok = false;
    }
    ok = ok && check_override_count(*x.plan->d, static_cast<size_t>(n[0]), "override_uids");
    if (ok) o.reset(static_cast<size_t>(n[0]));
    for (Py_ssize_t i = 0; ok && i < n[0]; ++i) {
        size_t k = static_cast<size_t>(i);
        PyObject* tkey;
        ok = resolve_key(x, PyTuple_GET_ITEM(snap[0], i), KeyUse::kOverride, &o.uids[k], &o.index[k], &tkey);
        if (ok) o.hold_key(k, tkey);
    }
    for (Py_ssize_t i = 0; ok && i < n[0]; ++i)
        ok = read_ints(PyTuple_GET_ITEM(snap[1], i), o.shapes[static_cast<size_t>(i)],
                       "override_shapes[" + std::to_string(i) + "]");
    for (Py_ssize_t i = 0; ok && i < n[0]; ++i)
        ok = read_ints(PyTuple_GET_ITEM(snap[2], i), o.strides[static_cast<size_t>(i)],
                       "override_strides[" + std::to_string(i) + "]");
    for (int i = 0; i < 3; ++i) Py_XDECREF(snap[i]);
    return ok;
}

bool refuse_flagless(const PlanData& d) {
    std::string msg =
        "graph " + quoted(d.graph_name) + " was built without set_override_shape_enabled(True); overrides refused";
    if (g.refusal_logger) {
        PyObject* m = PyUnicode_FromString(msg.c_str());
        PyObject* r = m ? PyObject_CallOneArg(g.refusal_logger, m) : nullptr;
        Py_XDECREF(m);
        if (!r) PyErr_Clear();
        Py_XDECREF(r);
    }
    raise(kInvalidValue, msg);
    return false;
}

}  // namespace hipdnn_core
