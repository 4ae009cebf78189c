// Binding: the bound call (g.bind), everything that does not change per call resolved once.
#include <cstdio>

#include "core.h"

namespace hipdnn_core {

// ============================================================================================
// Binding: the bound call
// ============================================================================================
struct BindingData {
    Executor* executor = nullptr;
    std::vector<int64_t> uids;
    std::vector<int> override_index;  // tensor index of each bound override
    std::vector<int64_t> override_uids;
    std::vector<uint32_t> lengths;
    size_t total_rank = 0;
    // Aliasing, per pointer slot: its tensor, whether a node writes it, and the bytes it spans at the
    // declared maximum (-1: unbounded, a dynamic tensor, which every call overrides).
    std::vector<int> slot_tensor;
    std::vector<uint8_t> slot_written;
    std::vector<int64_t> slot_bytes;
    std::vector<size_t> override_slot;  // pointer slot of each bound override
    std::vector<size_t> slot_override;  // per pointer slot, its override's index (SIZE_MAX: none)
    // per slot, the declared layout (dims and strides of the plan's table), rank and element size
    std::vector<const int64_t*> slot_dims, slot_strides;
    std::vector<uint32_t> slot_rank;
    std::vector<int> slot_itemsize;
    std::vector<size_t> written_slots;  // the slots nodes write
};

struct Binding {
    PyObject_HEAD
    BindingData* b;
    vectorcallfunc vectorcall;
};

void Binding_dealloc(PyObject* self) {
    Binding* b = reinterpret_cast<Binding*>(self);
    if (b->b) {
        Py_XDECREF(reinterpret_cast<PyObject*>(b->b->executor));
        delete b->b;
    }
    Py_TYPE(self)->tp_free(self);
}

struct BoundScratch {
    std::vector<hipdnnPluginDeviceBuffer_t> buffers;
    std::vector<Span> spans;
    std::vector<int64_t> bytes;
    OverrideSet overrides;
    std::vector<const int64_t*> shape_ptrs, stride_ptrs;
    std::vector<const int64_t*> slot_dims, slot_strides;  // this call's layout per slot
    Effective eff;
};
thread_local BoundScratch tl_bound;
thread_local int tl_bound_depth = 0;

// The bound call's override values: `m` shapes and `m` strides, each a sequence of ints. Lists and
// tuples of exact ints are read without running Python code; anything else from private snapshots.
bool read_bound_overrides(PyObject* shapes, PyObject* strides, size_t m, OverrideSet& o) {
    PyObject* outer[2] = {shapes, strides};
    std::vector<std::vector<int64_t>>* into[2] = {&o.shapes, &o.strides};
    const char* what[2] = {"override_shapes", "override_strides"};
    bool fast = true;
    for (int w = 0; w < 2 && fast; ++w) {
        PyObject* seq = outer[w];
        fast = (PyList_CheckExact(seq) || PyTuple_CheckExact(seq)) &&
               static_cast<size_t>(PySequence_Fast_GET_SIZE(seq)) == m;
        for (size_t i = 0; fast && i < m; ++i)
            fast = read_exact_ints(PySequence_Fast_GET_ITEM(seq, static_cast<Py_ssize_t>(i)), (*into[w])[i]);
    }
    if (fast) return true;
    PyObject* snap[2] = {nullptr, nullptr};
    bool ok = true;
    for (int w = 0; w < 2 && ok; ++w) {
        snap[w] = snapshot(outer[w], what[w], "int sequences", kInvalidValue);
        ok = snap[w] != nullptr;
    }
    if (ok && (static_cast<size_t>(PyTuple_GET_SIZE(snap[0])) != m ||
               static_cast<size_t>(PyTuple_GET_SIZE(snap[1])) != m)) {
        raise(kInvalidValue, "rule 1 (length consistency): bound for " + std::to_string(m) + " overrides, got " +
                                 std::to_string(PyTuple_GET_SIZE(snap[0])) + " shapes and " +
                                 std::to_string(PyTuple_GET_SIZE(snap[1])) + " strides");
        ok = false;
    }
    for (int w = 0; w < 2 && ok; ++w)
        for (size_t i = 0; ok && i < m; ++i)
            ok = read_ints(PyTuple_GET_ITEM(snap[w], static_cast<Py_ssize_t>(i)), (*into[w])[i],
                           std::string(what[w]) + "[" + std::to_string(i) + "]");
    Py_XDECREF(snap[0]);
    Py_XDECREF(snap[1]);
    return ok;
}

// Slot i's pointer from the int p: a non-zero address aligned to the slot's elements.
bool bind_pointer(BindingData& bd, PlanData& d, BoundScratch& s, size_t i, PyObject* p) {
    unsigned long long v = 0;
    if (PyLong_Check(p) && !PyBool_Check(p)) {
        v = PyLong_AsUnsignedLongLong(p);
        if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
            PyErr_Clear();
            v = 0;
        }
    }
    int align = bd.slot_itemsize[i];
    if (!v || (align > 1 && v % static_cast<unsigned long long>(align) != 0)) {
        std::string what = !PyLong_Check(p) || PyBool_Check(p) ? "pointer " + py_repr(p) + " (not an int)"
                           : !v ? "pointer " + py_repr(p) + " (not an address)"
                                : "pointer " + py_repr(p) + " (not aligned to its " + std::to_string(align) +
                                      "-byte elements)";
        raise(kInvalidVariantPack, what + " for " + d.tensors[static_cast<size_t>(bd.slot_tensor[i])].label);
        return false;
    }
    s.buffers[i].uid = bd.uids[i];
    s.buffers[i].ptr = reinterpret_cast<void*>(v);
    return true;
}

// Slot i's pointer from an address read elsewhere (a tensor's data_ptr()): non-zero and aligned to the
// slot's elements, as bind_pointer asks of an int.
bool set_pointer(BindingData& bd, PlanData& d, BoundScratch& s, size_t i, uint64_t v) {
    int align = bd.slot_itemsize[i];
    if (!v || (align > 1 && v % static_cast<uint64_t>(align) != 0)) {
        char shown[32];
        std::snprintf(shown, sizeof shown, "0x%llx", static_cast<unsigned long long>(v));
        raise(kInvalidVariantPack, std::string("pointer ") + shown +
                                       (!v ? " (not an address)"
                                           : " (not aligned to its " + std::to_string(align) + "-byte elements)") +
                                       " for " + d.tensors[static_cast<size_t>(bd.slot_tensor[i])].label);
        return false;
    }
    s.buffers[i].uid = bd.uids[i];
    s.buffers[i].ptr = reinterpret_cast<void*>(v);
    return true;
}

// The bound call's workspace argument (None or absent: 0), which the plan may require.
bool read_workspace(PlanData& d, PyObject* arg, uint64_t* ws) {
    *ws = 0;
    if (arg && arg != Py_None) {
        if (!PyLong_Check(arg) || PyBool_Check(arg)) {
            raise(kInvalidValue, "the bound call's workspace is an int pointer");
            return false;
        }
        *ws = PyLong_AsUnsignedLongLong(arg);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            raise(kInvalidValue, "workspace pointer " + py_repr(arg) + " is not a valid address");
            return false;
        }
    }
    if (d.workspace_size && !*ws) {
        raise(kInvalidValue, "the plan needs a workspace of " + std::to_string(d.workspace_size) + " bytes");
        return false;
    }
    return true;
}

// The bound call's overrides (s.overrides, read) checked against the declared tensors: this call's
// bytes and layout per slot.
bool apply_overrides(BindingData& bd, ExecutorData& x, PlanData& d, BoundScratch& s) {
    OverrideSet& o = s.overrides;
    size_t m = o.size();
    s.bytes.assign(bd.slot_bytes.begin(), bd.slot_bytes.end());
    s.slot_dims.assign(bd.slot_dims.begin(), bd.slot_dims.end());  // the declared layouts, overridden below
    s.slot_strides.assign(bd.slot_strides.begin(), bd.slot_strides.end());
    for (size_t i = 0; i < m; ++i) {
        size_t idx = static_cast<size_t>(o.index[i]);
        const TensorSpec& t = d.tensors[idx];
        int64_t elems = 0;
        if (!check_entry(t, o.uids[i], o.shapes[i].data(), o.shapes[i].size(), o.strides[i].data(),
                         o.strides[i].size(), true, x.is_output[idx] != 0, &elems))
            return false;
        int itemsize = itemsize_of(t.data_type);
        int64_t bytes = 0;
        size_t slot = bd.override_slot[i];
        s.bytes[slot] = __builtin_mul_overflow(elems, int64_t{itemsize ? itemsize : 1}, &bytes) ? -1 : bytes;
        s.slot_dims[slot] = o.shapes[i].data();
        s.slot_strides[slot] = o.strides[i].data();
    }
    return true;
}

// The rest of a bound call once its pointers (s.buffers) and overrides are read and checked: the
// effective shapes, aliasing, then the plugin.
PyObject* launch_bound(BindingData& bd, ExecutorData& x, PlanData& d, BoundScratch& s, uint64_t ws) {
    OverrideSet& o = s.overrides;
    size_t n = bd.uids.size();
    if ((o.size() || d.has_dynamic) && !check_effective(x, o, s.eff)) return nullptr;
    size_t n_written = bd.written_slots.size();
    const int64_t* bytes_now = o.size() ? s.bytes.data() : bd.slot_bytes.data();
    const int64_t* const* dims_now = o.size() ? s.slot_dims.data() : bd.slot_dims.data();
    const int64_t* const* strides_now = o.size() ? s.slot_strides.data() : bd.slot_strides.data();
    if ((n_written + 1) * (n + 1) <= 64) {
        if (!check_alias_few(d, s.buffers.data(), bytes_now, bd.slot_tensor.data(), bd.slot_written.data(),
                             dims_now, strides_now, bd.slot_rank.data(), bd.slot_itemsize.data(),
                             bd.written_slots.data(), n_written, n, ws, d.workspace_size))
            return nullptr;
    } else {
        s.spans.clear();
        size_t written = 0;
        Span sp;
        for (size_t i = 0; i < n; ++i) {
            if (span_at(reinterpret_cast<uint64_t>(s.buffers[i].ptr), bytes_now[i], bd.slot_tensor[i],
                        bd.slot_written[i] != 0, dims_now[i], strides_now[i], bd.slot_rank[i],
                        bd.slot_itemsize[i], &sp))
                add_span(s.spans, &written, sp);
        }
        if (ws && d.workspace_size &&
            span_at(ws, static_cast<int64_t>(std::min<uint64_t>(d.workspace_size, INT64_MAX)), -1, true, nullptr,
                    nullptr, 0, 1, &sp))
            add_span(s.spans, &written, sp);
        Span first, second;
        if (find_alias(s.spans.data(), s.spans.size(), written, &first, &second)) return raise_alias(d, first, second);
    }
    s.shape_ptrs.resize(o.size());
    s.stride_ptrs.resize(o.size());
    for (size_t k = 0; k < o.size(); ++k) {
        s.shape_ptrs[k] = o.shapes[k].data();
        s.stride_ptrs[k] = o.strides[k].data();
    }
    CallArgs a;
    a.workspace = reinterpret_cast<void*>(ws);
    a.buffers = s.buffers.data();
    a.num_buffers = static_cast<uint32_t>(n);
    a.num_overrides = static_cast<uint32_t>(o.size());
    a.override_uids = o.uids.data();
    a.lengths = bd.lengths.data();
    a.shapes = s.shape_ptrs.data();
    a.strides = s.stride_ptrs.data();
    if (!enter(d) || !call_plugin(d, a)) return nullptr;
    Py_RETURN_NONE;
}

PyObject* Binding_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
    BindingData& bd = *reinterpret_cast<Binding*>(self)->b;
    ExecutorData& x = *bd.executor->x;
    PlanData& d = *x.plan->d;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject* params[4] = {nullptr, nullptr, Py_None, Py_None};
    static const char* names[4] = {"ptrs", "workspace", "override_shapes", "override_strides"};
    if (nargs > 4) {
        PyErr_SetString(PyExc_TypeError, "bound call takes at most 4 arguments");
        return nullptr;
    }
    for (Py_ssize_t i = 0; i < nargs; ++i) params[i] = args[i];
    if (kwnames) {
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(kwnames); ++k) {
            const char* kw = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
            int slot = -1;
            for (int j = 0; j < 4 && kw; ++j)
                if (std::strcmp(kw, names[j]) == 0) slot = j;
            if (slot < 0 || slot < nargs) {
                PyErr_Format(PyExc_TypeError, "bound call got an unexpected or repeated keyword %s", kw ? kw : "?");
                return nullptr;
            }
            params[slot] = args[nargs + k];
        }
    }
    if (!params[0]) {
        PyErr_SetString(PyExc_TypeError, "bound call needs ptrs");
        return nullptr;
    }
    ScratchLease<BoundScratch> lease(tl_bound, tl_bound_depth);
    BoundScratch& s = lease.get();
    size_t n = bd.uids.size();
    PyObject* ptrs = PySequence_Fast(params[0], "");
    if (!ptrs) {
        PyErr_Clear();
        return raise(kInvalidVariantPack, "pointers must be a sequence of ints");
    }
    if (static_cast<size_t>(PySequence_Fast_GET_SIZE(ptrs)) != n) {
        std::string m = "expected " + std::to_string(n) + " pointers, got " +
                        std::to_string(PySequence_Fast_GET_SIZE(ptrs));
        Py_DECREF(ptrs);
        return raise(kInvalidVariantPack, m);
    }
    s.buffers.resize(n);
    PyObject** items = PySequence_Fast_ITEMS(ptrs);
    for (size_t i = 0; i < n; ++i) {
        if (!bind_pointer(bd, d, s, i, items[i])) {
            Py_DECREF(ptrs);
            return nullptr;
        }
    }
    Py_DECREF(ptrs);
    uint64_t ws = 0;
    if (!read_workspace(d, params[1], &ws)) return nullptr;
    PyObject* shapes = params[2];
    PyObject* strides = params[3];
    OverrideSet& o = s.overrides;
    o.clear();
    size_t m = bd.override_uids.size();
    if (m && shapes != Py_None) {
        if (strides == Py_None) return raise(kInvalidValue, "override shapes given without override strides");
        o.reset(m);
        std::copy(bd.override_uids.begin(), bd.override_uids.end(), o.uids.begin());
        std::copy(bd.override_index.begin(), bd.override_index.end(), o.index.begin());
        if (!read_bound_overrides(shapes, strides, m, o)) return nullptr;
        if (!apply_overrides(bd, x, d, s)) return nullptr;
    } else if (shapes != Py_None || strides != Py_None) {
        return raise(kInvalidValue, m ? "override strides given without override shapes"
                                       : "override values given, but no override uids were bound");
    }
    return launch_bound(bd, x, d, s, ws);
}

PyObject* Binding_get_uids(PyObject* self, void*) {
    BindingData& bd = *reinterpret_cast<Binding*>(self)->b;
    PyObject* l = PyList_New(static_cast<Py_ssize_t>(bd.uids.size()));
    for (size_t i = 0; l && i < bd.uids.size(); ++i)
        PyList_SET_ITEM(l, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(bd.uids[i]));
    return l;
}

PyObject* Binding_get_override_uids(PyObject* self, void*) {
    BindingData& bd = *reinterpret_cast<Binding*>(self)->b;
    PyObject* l = PyList_New(static_cast<Py_ssize_t>(bd.override_uids.size()));
    for (size_t i = 0; l && i < bd.override_uids.size(); ++i)
        PyList_SET_ITEM(l, static_cast<Py_ssize_t>(i), PyLong_FromLongLong(bd.override_uids[i]));
    return l;
}

// One tuple of ints read without running Python code: a tuple or a tuple subclass (torch.Size), both
// immutable, of exact ints.
bool read_int_tuple(PyObject* seq, std::vector<int64_t>& out) {
    if (!PyTuple_Check(seq)) return false;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    out.resize(static_cast<size_t>(n));
    return read_exact_int_items(PySequence_Fast_ITEMS(seq), n, out.data());
}

// Slot i of call_tensors from the tensor t: its data_ptr() as the pointer, its shape and stride() as
// the slot's override. Python code t runs (its methods) sees only t; the caller holds t.
bool read_tensor(BindingData& bd, PlanData& d, BoundScratch& s, size_t i, PyObject* t) {
    static PyObject* data_ptr = PyUnicode_InternFromString("data_ptr");
    static PyObject* shape = PyUnicode_InternFromString("shape");
    static PyObject* stride = PyUnicode_InternFromString("stride");
    if (!data_ptr || !shape || !stride) return false;
    if (!torch_reads_begin()) return as_hipdnn_error(kInvalidVariantPack, "call_tensors: cannot read torch's mode state");
    const TensorSpec& spec = d.tensors[static_cast<size_t>(bd.slot_tensor[i])];
    const std::string& label = spec.label;
    OverrideSet& o = s.overrides;
    size_t k = bd.slot_override[i];
    // A tensor that states its element type must state the slot's: the engine addresses the call's
    // shape in the slot's elements, so a smaller element (float16 for a float32 slot) would have it
    // read and write past the tensor. An object without `dtype` is trusted, as a pointer is.
    PyObject* dt = PyObject_GetAttr(t, g.str_dtype);
    if (!dt) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return as_hipdnn_error(kInvalidVariantPack, "call_tensors: " + label + ": dtype failed");
        PyErr_Clear();
    } else {
        PyObject* info = dtype_record(dt);
        Py_DECREF(dt);
        long code = -1, itemsize = 0;
        const char* name = nullptr;
        if (!info || !PyArg_ParseTuple(info, "lsl", &code, &name, &itemsize)) {
            Py_XDECREF(info);
            return as_hipdnn_error(kInvalidVariantPack, "call_tensors: " + label + ": cannot read its dtype");
        }
        int want = itemsize_of(spec.data_type);
        if (code >= 0 ? code != spec.data_type : (want && itemsize != want)) {
            std::string have = name;
            Py_DECREF(info);
            raise(kInvalidVariantPack, "call_tensors: " + label + ": dtype " + have + " disagrees with " +
                                           dtype_name(spec.data_type));
            return false;
        }
        Py_DECREF(info);
    }
    PyObject* p = PyObject_CallMethodNoArgs(t, data_ptr);
    if (!p) return as_hipdnn_error(kInvalidVariantPack, "call_tensors: " + label + ": data_ptr() failed");
    bool ok = bind_pointer(bd, d, s, i, p);
    Py_DECREF(p);
    if (!ok) return false;
    const char* what[2] = {"shape", "stride()"};
    for (int w = 0; w < 2; ++w) {
        PyObject* v = w == 0 ? PyObject_GetAttr(t, shape) : PyObject_CallMethodNoArgs(t, stride);
        if (!v) return as_hipdnn_error(kInvalidVariantPack, "call_tensors: " + label + ": " + what[w] + " failed");
        ok = read_int_tuple(v, w == 0 ? o.shapes[k] : o.strides[k]);
        if (!ok) raise(kInvalidVariantPack, "call_tensors: " + label + ": " + what[w] + " is " + py_repr(v) +
                                                ", not a tuple of ints");
        Py_DECREF(v);
        if (!ok) return false;
    }
    if (g.torch_tensor && PyObject_TypeCheck(t, reinterpret_cast<PyTypeObject*>(g.torch_tensor)))
        torch_reads_log(t, label.c_str(), reinterpret_cast<uint64_t>(s.buffers[i].ptr), o.shapes[k].data(),
                        o.strides[k].data(), o.shapes[k].size());
    return true;
}

PyObject* run_read_call(BindingData& bd, ExecutorData& x, PlanData& d, BoundScratch& s, uint64_t ws);

// A call whose every pointer slot is an override: the scratch's buffers sized and its override set
// holding the bound uids, each slot's shape and strides left for the caller to read.
OverrideSet& start_override_call(BindingData& bd, BoundScratch& s) {
    s.buffers.resize(bd.uids.size());
    OverrideSet& o = s.overrides;
    o.clear();
    o.reset(bd.override_uids.size());
    std::copy(bd.override_uids.begin(), bd.override_uids.end(), o.uids.begin());
    std::copy(bd.override_index.begin(), bd.override_index.end(), o.index.begin());
    return o;
}

// Binding.call_tensors(tensors, workspace=0): the bound call for tensors that say where they are (torch
// tensors: data_ptr(), .shape, .stride()), one per pointer slot in bind order, each one's shape and
// strides its slot's override (every slot must be bound as an override). True: the call ran. False,
// nothing launched: a tensor exceeds its declared maximum (dims, or elements addressed), so the caller
// needs a larger plan. Everything else the bound call refuses raises, as there.
PyObject* Binding_call_tensors(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    BindingData& bd = *reinterpret_cast<Binding*>(self)->b;
    ExecutorData& x = *bd.executor->x;
    PlanData& d = *x.plan->d;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "call_tensors(tensors, workspace=0)");
        return nullptr;
    }
    size_t n = bd.uids.size();
    size_t m = bd.override_uids.size();
    if (m != n) return raise(kInvalidValue, "call_tensors: every pointer slot must be bound as an override");
    uint64_t ws = 0;
    if (!read_workspace(d, nargs > 1 ? args[1] : nullptr, &ws)) return nullptr;
    // a private tuple holding every tensor for the whole call, whatever their methods do
    PyObject* held = snapshot(args[0], "call_tensors: tensors", "tensors", kInvalidVariantPack);
    if (!held) return nullptr;
    struct Hold {
        PyObject* o;
        ~Hold() { Py_DECREF(o); }
    } hold{held};
    if (static_cast<size_t>(PyTuple_GET_SIZE(held)) != n)
        return raise(kInvalidVariantPack, "call_tensors: expected " + std::to_string(n) + " tensors, got " +
                                              std::to_string(PyTuple_GET_SIZE(held)));
    ScratchLease<BoundScratch> lease(tl_bound, tl_bound_depth);
    BoundScratch& s = lease.get();
    start_override_call(bd, s);
    TorchReadScope reads;
    bool plain = true;  // every tensor exactly torch.Tensor: with modes off, reading runs no one's code
    for (size_t i = 0; i < n; ++i) {
        PyObject* t = PyTuple_GET_ITEM(held, static_cast<Py_ssize_t>(i));
        if (!read_tensor(bd, d, s, i, t)) return nullptr;
        plain = plain && g.torch_tensor && reinterpret_cast<PyObject*>(Py_TYPE(t)) == g.torch_tensor;
    }
    if (!plain && !reads.verify()) return nullptr;
    return run_read_call(bd, x, d, s, ws);
}

// The end of a call whose every slot is an override, its pointers and overrides read into `s`: False
// (nothing launched) when a tensor exceeds its declared maximum (dims, or elements addressed), else
// the overrides checked and the plugin called: True, or nullptr with the error raised.
PyObject* run_read_call(BindingData& bd, ExecutorData& x, PlanData& d, BoundScratch& s, uint64_t ws) {
    OverrideSet& o = s.overrides;
    size_t m = o.size();
    for (size_t k = 0; k < m; ++k) {
        const TensorSpec& t = d.tensors[static_cast<size_t>(o.index[k])];
        const std::vector<int64_t>& dims = o.shapes[k];
        const std::vector<int64_t>& strides = o.strides[k];
        if (dims.size() != t.rank() || strides.size() != t.rank()) continue;  // check_entry says so
        bool positive = true;
        for (size_t a = 0; a < dims.size(); ++a) {
            positive = positive && dims[a] > 0 && strides[a] > 0;
            if (t.dims[a] != -1 && dims[a] > t.dims[a]) Py_RETURN_FALSE;
        }
        int64_t elems = 0;
        if (positive && t.max_elements >= 0 && addressed_elements(dims.data(), strides.data(), dims.size(), &elems) &&
            elems > t.max_elements)
            Py_RETURN_FALSE;
    }
    if (!apply_overrides(bd, x, d, s)) return nullptr;
    PyObject* r = launch_bound(bd, x, d, s, ws);
    if (!r) return nullptr;
    Py_DECREF(r);
    Py_RETURN_TRUE;
}

bool is_binding(PyObject* o) { return Py_TYPE(o) == &BindingType; }

PyObject* call_bound_read(PyObject* binding, size_t n, const uint64_t* ptrs, const int64_t* const* shapes,
                          const int64_t* const* strides, const size_t* ranks, uint64_t ws) {
    BindingData& bd = *reinterpret_cast<Binding*>(binding)->b;
    ExecutorData& x = *bd.executor->x;
    PlanData& d = *x.plan->d;
    size_t m = bd.override_uids.size();
    if (n != bd.uids.size() || m != n)
        return raise(kInvalidValue, "a read call needs " + std::to_string(bd.uids.size()) +
                                        " tensors, every slot bound as an override; got " + std::to_string(n));
    if (d.workspace_size && !ws)
        return raise(kInvalidValue, "the plan needs a workspace of " + std::to_string(d.workspace_size) + " bytes");
    ScratchLease<BoundScratch> lease(tl_bound, tl_bound_depth);
    BoundScratch& s = lease.get();
    OverrideSet& o = start_override_call(bd, s);
    for (size_t i = 0; i < n; ++i) {
        if (!set_pointer(bd, d, s, i, ptrs[i])) return nullptr;
        size_t k = bd.slot_override[i];
        o.shapes[k].assign(shapes[i], shapes[i] + ranks[i]);
        o.strides[k].assign(strides[i], strides[i] + ranks[i]);
    }
    return run_read_call(bd, x, d, s, ws);
}

uint64_t bound_workspace_size(PyObject* binding) {
    return reinterpret_cast<Binding*>(binding)->b->executor->x->plan->d->workspace_size;
}

PyMethodDef Binding_methods[] = {
    {"call_tensors", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(Binding_call_tensors)),
     METH_FASTCALL, "call_tensors(tensors, workspace=0) -> bool: the bound call for torch-like tensors"},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef Binding_getset[] = {
    {"uids", Binding_get_uids, nullptr, nullptr, nullptr},
    {"override_uids", Binding_get_override_uids, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyTypeObject BindingType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// Executor.bind(uids, override_uids) -> Binding. Everything that does not change per call is
// checked here, once.
PyObject* Executor_bind(PyObject* self, PyObject* args) {
    ExecutorData& x = *reinterpret_cast<Executor*>(self)->x;
    PlanData& d = *x.plan->d;
    PyObject *uids, *o_uids;
    if (!PyArg_ParseTuple(args, "OO", &uids, &o_uids)) return nullptr;
    auto* bd = new BindingData();
    auto fail = [bd]() -> PyObject* {
        delete bd;
        return nullptr;
    };
    PyObject* fu = PySequence_Fast(uids, "");
    if (!fu) {
        PyErr_Clear();
        raise(kInvalidValue, "bind: uids must be a sequence of tensors or uids");
        return fail();
    }
    std::vector<uint8_t> seen(d.tensors.size(), 0);
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fu); ++i) {
        int64_t uid;
        int index;
        PyObject* tkey;
        if (!resolve_key(x, PySequence_Fast_GET_ITEM(fu, i), KeyUse::kBind, &uid, &index, &tkey)) {
            Py_DECREF(fu);
            return fail();
        }
        if (index < 0) {
            Py_DECREF(fu);
            raise(kInvalidValue, tkey ? "bind: tensor (uid " + std::to_string(uid) + ") is not a tensor of this graph"
                                      : "bind: uid " + std::to_string(uid) + " is not a tensor of this graph");
            return fail();
        }
        const TensorSpec& t = d.tensors[static_cast<size_t>(index)];
        if (t.is_virtual) {
            Py_DECREF(fu);
            raise(kInvalidValue, "bind: tensor " + quoted(t.name) + " (uid " + std::to_string(uid) + ") is virtual");
            return fail();
        }
        if (seen[static_cast<size_t>(index)]) {
            Py_DECREF(fu);
            raise(kInvalidValue, "bind: a uid appears twice (uid " + std::to_string(uid) + ")");
            return fail();
        }
        seen[static_cast<size_t>(index)] = 1;
        bd->uids.push_back(uid);
        bd->slot_tensor.push_back(index);
        bool written = x.is_output[static_cast<size_t>(index)] != 0;
        bd->slot_written.push_back(written ? 1 : 0);
        if (written) bd->written_slots.push_back(bd->uids.size() - 1);
        int64_t bytes = -1;
        if (t.max_elements < 0 ||
            __builtin_mul_overflow(t.max_elements, int64_t{itemsize_of(t.data_type) ? itemsize_of(t.data_type) : 1},
                                   &bytes))
            bytes = -1;
        bd->slot_bytes.push_back(bytes);
        bd->slot_dims.push_back(t.dims.data());
        bd->slot_strides.push_back(t.strides.data());
        bd->slot_rank.push_back(static_cast<uint32_t>(t.rank()));
        bd->slot_itemsize.push_back(itemsize_of(t.data_type) ? itemsize_of(t.data_type) : 1);
    }
    Py_DECREF(fu);
    std::string missing;
    for (size_t t = 0; t < d.tensors.size(); ++t) {
        if (!d.tensors[t].is_virtual && !seen[t]) {
            if (!missing.empty()) missing += ", ";
            missing += quoted(d.tensors[t].name);
        }
    }
    if (!missing.empty()) {
        raise(kInvalidValue, "bind: no pointer slot for tensor(s) [" + missing + "]");
        return fail();
    }
    PyObject* fo = PySequence_Fast(o_uids, "");
    if (!fo) {
        PyErr_Clear();
        raise(kInvalidValue, "bind: override_uids must be a sequence of tensors or uids");
        return fail();
    }
    std::vector<uint8_t> oseen(d.tensors.size(), 0);
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fo); ++i) {
        int64_t uid;
        int index;
        PyObject* tkey;
        if (!resolve_key(x, PySequence_Fast_GET_ITEM(fo, i), KeyUse::kBind, &uid, &index, &tkey)) {
            Py_DECREF(fo);
            return fail();
        }
        if (index < 0 || d.tensors[static_cast<size_t>(index)].is_virtual) {
            Py_DECREF(fo);
            raise(kInvalidValue, "bind: uid " + std::to_string(uid) + " is not an overridable tensor of this graph");
            return fail();
        }
        if (oseen[static_cast<size_t>(index)]) {
            Py_DECREF(fo);
            raise(kInvalidValue, "bind: an override uid appears twice (uid " + std::to_string(uid) + ")");
            return fail();
        }
        oseen[static_cast<size_t>(index)] = 1;
        size_t slot = static_cast<size_t>(std::find(bd->slot_tensor.begin(), bd->slot_tensor.end(), index) -
                                          bd->slot_tensor.begin());
        bd->override_slot.push_back(slot);
        bd->override_uids.push_back(uid);
        bd->override_index.push_back(index);
        bd->lengths.push_back(static_cast<uint32_t>(d.tensors[static_cast<size_t>(index)].rank()));
    }
    Py_DECREF(fo);
    bd->slot_override.assign(bd->uids.size(), SIZE_MAX);
    for (size_t i = 0; i < bd->override_slot.size(); ++i) bd->slot_override[bd->override_slot[i]] = i;
    if (!bd->override_uids.empty()) {
        if (!d.override_enabled) {
            refuse_flagless(d);
            return fail();
        }
        if (!d.override_refusal.empty()) {
            raise(kGraphNotSupported, d.override_refusal);
            return fail();
        }
    }
    for (size_t t = 0; t < d.tensors.size(); ++t) {
        if (d.tensors[t].is_dynamic && !d.tensors[t].is_virtual && !oseen[t]) {
            raise(kInvalidValue, "bind: dynamic " + d.tensors[t].label +
                                     " needs an override at every call: list it in override_uids");
            return fail();
        }
    }
    Binding* b = PyObject_New(Binding, &BindingType);
    if (!b) return fail();
    b->b = bd;
    b->vectorcall = Binding_call;
    Py_INCREF(self);
    bd->executor = reinterpret_cast<Executor*>(self);
    return reinterpret_cast<PyObject*>(b);
}

bool ready_binding_type() {
    BindingType.tp_call = PyVectorcall_Call;
    BindingType.tp_vectorcall_offset = offsetof(Binding, vectorcall);
    BindingType.tp_name = "hipdnn.backend._execute_core.Binding";
    BindingType.tp_basicsize = sizeof(Binding);
    BindingType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
    BindingType.tp_dealloc = Binding_dealloc;
    BindingType.tp_getset = Binding_getset;
    BindingType.tp_methods = Binding_methods;
    return PyType_Ready(&BindingType) == 0;
}

}  // namespace hipdnn_core
