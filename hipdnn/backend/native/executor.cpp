// Executor: one per built Graph; Graph.execute's whole call.
#include "core.h"

namespace hipdnn_core {

// ============================================================================================
// Executor
// ============================================================================================

struct Scratch {
    Effective eff;
    std::vector<Span> spans;
    OverrideSet overrides;
    std::vector<hipdnnPluginDeviceBuffer_t> buffers;
    std::vector<uint8_t> seen;
    std::vector<PyObject*> releases;
    std::vector<uint32_t> lengths;
    std::vector<const int64_t*> shape_ptrs, stride_ptrs;
    std::vector<PyObject*> pairs;  // the variant pack's (key, value) pairs, held in `holds`
    Holds holds;
    Buf buf;
};

// Ends a call: the objects it held are dropped once the plugin has returned (or the call failed),
// with the GIL held, and nothing stays referenced by the thread's scratch.
struct CallEnd {
    Scratch& s;
    ~CallEnd() {
        if (!s.releases.empty()) run_releases(s.releases);
        s.overrides.clear();
        s.pairs.clear();
        s.holds.drop();
    }
};
thread_local Scratch tl_scratch;
thread_local int tl_scratch_depth = 0;
void Executor_dealloc(PyObject* self) {
    Executor* e = reinterpret_cast<Executor*>(self);
    if (e->x) {
        Py_XDECREF(reinterpret_cast<PyObject*>(e->x->plan));
        for (PyObject* k : e->x->keys) Py_DECREF(k);
        Py_XDECREF(e->x->stream_source);
        delete e->x;
    }
    Py_TYPE(self)->tp_free(self);
}
// Executor(plan_core, keys={tensor object: uid}, rules, stream_source, outputs=())
// `outputs`: the uids of the tensors nodes write; their memory may not alias any other tensor's.
PyObject* Executor_new(PyTypeObject* type, PyObject* args, PyObject*) {
    PyObject *plan, *keys, *rules, *stream_source, *outputs = nullptr;
    if (!PyArg_ParseTuple(args, "O!O!OO|O", &PlanCoreType, &plan, &PyDict_Type, &keys, &rules, &stream_source,
                          &outputs))
        return nullptr;
    Executor* self = reinterpret_cast<Executor*>(type->tp_alloc(type, 0));
    if (!self) return nullptr;
    auto* x = new ExecutorData();
    self->x = x;
    Py_INCREF(plan);
    x->plan = reinterpret_cast<PlanCore*>(plan);
    Py_INCREF(stream_source);
    x->stream_source = stream_source;
    const PlanData& d = *x->plan->d;
    // The pairs copied first: converting a uid runs its __index__, which may change the dict and free
    // the keys it held.
    PyObject* pairs = PyDict_Items(keys);
    if (!pairs) {
        Py_DECREF(self);
        return nullptr;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(pairs); ++i) {
        PyObject* k = PyTuple_GET_ITEM(PyList_GET_ITEM(pairs, i), 0);
        long long uid = PyLong_AsLongLong(PyTuple_GET_ITEM(PyList_GET_ITEM(pairs, i), 1));
        if (uid == -1 && PyErr_Occurred()) {
            Py_DECREF(pairs);
            Py_DECREF(self);
            return nullptr;
        }
        auto it = d.by_uid.find(uid);
        if (it == d.by_uid.end()) {
            Py_DECREF(pairs);
            Py_DECREF(self);
            PyErr_Format(PyExc_ValueError, "key uid %lld is not a tensor of the plan", uid);
            return nullptr;
        }
        Py_INCREF(k);
        x->keys.push_back(k);
        x->by_key[k] = it->second;
    }
    Py_DECREF(pairs);
    if (!parse_rules(rules, x->nodes, d)) {
        Py_DECREF(self);
        return nullptr;
    }
    x->computed_offset.resize(d.tensors.size());
    for (size_t i = 0; i < d.tensors.size(); ++i) {
        x->computed_offset[i] = x->computed_size;
        if (d.tensors[i].is_virtual) x->computed_size += d.tensors[i].rank();
    }
    x->is_output.assign(d.tensors.size(), 0);
    if (outputs && outputs != Py_None) {
        std::vector<int64_t> uids;
        if (!read_ints(outputs, uids, "outputs")) {
            Py_DECREF(self);
            return nullptr;
        }
        for (int64_t uid : uids) {
            auto it = d.by_uid.find(uid);
            if (it == d.by_uid.end()) {
                Py_DECREF(self);
                PyErr_Format(PyExc_ValueError, "output uid %lld is not a tensor of the plan", static_cast<long long>(uid));
                return nullptr;
            }
            size_t i = static_cast<size_t>(it->second);
            if (!d.tensors[i].is_virtual) x->is_output[i] = 1;
        }
    }
    return reinterpret_cast<PyObject*>(self);
}

uint64_t read_stream(const ExecutorData& x) {
    PyObject* s = PyObject_GetAttrString(x.stream_source, "stream");
    if (!s) {
        PyErr_Clear();
        return 0;
    }
    uint64_t v = PyLong_AsUnsignedLongLong(s);
    Py_DECREF(s);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return v;
}
namespace {

// The variant pack's (key, value) pairs, copied with strong references before any value is read:
// reading one runs Python code (__array_interface__, __dlpack__, a resolver) that may change the
// pack, or the list its items() returned, or (another thread) replace its values.
bool snapshot_pack(PyObject* pack, Scratch& s) {
    if (!is_mapping(pack)) {
        raise(kInvalidVariantPack, "the variant pack must be a mapping {tensor or uid: buffer}, got " +
                                       std::string(Py_TYPE(pack)->tp_name));
        return false;
    }
    if (PyDict_Check(pack)) {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(pack, &pos, &key, &value)) {  // runs no Python code
            s.holds.keep(key);
            s.holds.keep(value);
            s.pairs.push_back(key);
            s.pairs.push_back(value);
        }
        return true;
    }
    PyObject* listed = PyMapping_Items(pack);
    if (!listed) return raise_chained(kInvalidVariantPack, "cannot read the variant pack's items"), false;
    PyObject* items = PySequence_Tuple(listed);  // our own copy: the list may be the mapping's
    Py_DECREF(listed);
    if (!items) return raise_chained(kInvalidVariantPack, "cannot read the variant pack's items"), false;
    s.holds.keep(items);
    Py_DECREF(items);
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* kv = PyTuple_GET_ITEM(items, i);
        if (!PyTuple_Check(kv) || PyTuple_GET_SIZE(kv) != 2) {
            raise(kInvalidVariantPack, "the variant pack's items() yielded " + py_repr(kv) +
                                           ", not a (key, buffer) pair");
            return false;
        }
        s.pairs.push_back(PyTuple_GET_ITEM(kv, 0));  // held by the tuple `items` holds
        s.pairs.push_back(PyTuple_GET_ITEM(kv, 1));
    }
    return true;
}

// The workspace: None or 0 when the plan needs none; else one contiguous, writable byte range of at
// least the size asked, aligned to 16 bytes (what every allocator gives; engines keep typed scratch
// in it). A bare pointer is trusted for its size.
bool read_workspace(const PlanData& d, PyObject* workspace, uint64_t stream, Scratch& s, uint64_t* ws) {
    *ws = 0;
    bool none = workspace == Py_None;
    if (!none && PyLong_CheckExact(workspace)) {
        int overflow = 0;
        none = PyLong_AsLongLongAndOverflow(workspace, &overflow) == 0 && !overflow;
    }
    if (none) {
        if (!d.workspace_size) return true;
        raise(kInvalidValue, "the plan needs a workspace of " + std::to_string(d.workspace_size) + " bytes");
        return false;
    }
    Buf wb;
    static const std::string label = "workspace";  // (outlives the call: the torch read log keeps it)
    if (!read_value(workspace, label, stream, wb, s.releases, s.holds)) return false;
    *ws = wb.ptr;
    if (!wb.sized) return true;
    uint64_t holds = wb.high > wb.ptr ? wb.high - wb.ptr : 0;
    const char* why = nullptr;
    if (wb.readonly) {
        why = "is read-only; the engine writes its workspace";
    } else if (!wb.contiguous) {
        why = "is not one contiguous byte range (a strided view); the engine writes every byte of it";
    } else if (wb.ptr % 16 != 0) {
        why = "is not aligned to 16 bytes";
    } else if (wb.ptr < wb.low || holds < d.workspace_size) {
        raise(kInvalidValue, "workspace holds " + std::to_string(holds) + " bytes, the plan needs " +
                                 std::to_string(d.workspace_size));
        return false;
    }
    if (why) {
        raise(kInvalidValue, std::string("workspace ") + why);
        return false;
    }
    return true;
}

}  // namespace

// execute(variant_pack, workspace, override_uids, override_shapes, override_strides, overrides)
PyObject* Executor_execute(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "execute takes 6 arguments");
        return nullptr;
    }
    Py_INCREF(self);  // the executor (and its plan) outlive the call whatever Python code runs in it
    struct SelfRef {
        PyObject* o;
        ~SelfRef() { Py_DECREF(o); }
    } self_ref{self};
    ExecutorData& x = *reinterpret_cast<Executor*>(self)->x;
    PlanData& d = *x.plan->d;
    PyObject* pack = args[0];
    PyObject* workspace = args[1];
    PyObject* o_uids = args[2];
    PyObject* map = args[5];
    // The design card's positional form: a mapping in override_uids' place is the map form.
    if (map == Py_None && o_uids != Py_None && args[3] == Py_None && args[4] == Py_None && is_mapping(o_uids)) {
        map = o_uids;
        o_uids = Py_None;
    }
    ScratchLease<Scratch> lease(tl_scratch, tl_scratch_depth);
    TorchReadScope reads;  // (torch tensors in the pack, the workspace: read with no mode's code running)
    Scratch& s = lease.get();
    CallEnd end{s};
    size_t nt = d.tensors.size();
    s.holds.views.reserve(nt + 1);  // one per tensor and the workspace: never reallocated while held
    OverrideSet& o = s.overrides;
    if (!lower_overrides(x, o_uids, args[3], args[4], map, o)) return nullptr;
    if (o.size() && !d.override_enabled) return refuse_flagless(d), nullptr;
    if (o.size() && !check_overrides(d, o, false, x.is_output.data())) return nullptr;
    if ((o.size() || d.has_dynamic) && !check_effective(x, o, s.eff)) return nullptr;

    // Variant pack.
    if (!snapshot_pack(pack, s)) return nullptr;
    s.spans.clear();
    size_t written = 0;
    s.seen.assign(nt, 0);
    s.buffers.clear();
    uint64_t stream = d.location == kLocationHost ? 0 : read_stream(x);
    // override index by tensor, to find a tensor's effective dims and strides
    SmallVec<int, 64> override_of(nt);
    for (size_t t = 0; t < nt; ++t) override_of[t] = -1;
    for (size_t k = 0; k < o.size(); ++k) override_of[static_cast<size_t>(o.index[k])] = static_cast<int>(k);
    for (size_t p = 0; p + 1 < s.pairs.size(); p += 2) {
        PyObject* key = s.pairs[p];
        PyObject* value = s.pairs[p + 1];
        int64_t uid;
        int index;
        PyObject* tkey;
        if (!resolve_key(x, key, KeyUse::kVariantPack, &uid, &index, &tkey)) return nullptr;
        if (index < 0)
            return raise(kInvalidVariantPack, "variant pack uid " + std::to_string(uid) + " is not a tensor of this graph");
        const TensorSpec& t = d.tensors[static_cast<size_t>(index)];
        if (s.seen[static_cast<size_t>(index)])
            return raise(kInvalidVariantPack, "uid " + std::to_string(uid) + " appears twice in the variant pack");
        s.seen[static_cast<size_t>(index)] = 1;
        if (t.is_virtual) {
            return raise(kInvalidVariantPack, "tensor " + quoted(t.name) + " (uid " + std::to_string(uid) +
                                                  ") is virtual and takes no buffer; set_output(True) to read it");
        }
        Buf& b = s.buf;
        b.reset();
        if (!read_value(value, t.label, stream, b, s.releases, s.holds)) return nullptr;
        bool is_written = x.is_output[static_cast<size_t>(index)] != 0;
        if (b.sized && b.readonly && is_written)
            return raise(kInvalidVariantPack, t.label + ": array is read-only, and a node writes this tensor");
        int ov = override_of[static_cast<size_t>(index)];
        const int64_t* dims = ov >= 0 ? o.shapes[static_cast<size_t>(ov)].data() : t.dims.data();
        const int64_t* strides = ov >= 0 ? o.strides[static_cast<size_t>(ov)].data() : t.strides.data();
        int64_t extent = -1;
        if (!check_buffer(b, t.label, t.data_type, dims, strides, t.rank(), ov >= 0, &extent)) return nullptr;
        int itemsize = itemsize_of(t.data_type) ? itemsize_of(t.data_type) : (b.itemsize > 0 ? b.itemsize : 1);
        if (!b.sized) {
            // A bare pointer is trusted to hold the tensor: it spans what the tensor addresses.
            if (itemsize > 1 && b.ptr % static_cast<uint64_t>(itemsize) != 0)
                return raise(kInvalidVariantPack, t.label + ": pointer " + std::to_string(b.ptr) +
                                                      " is not aligned to its " + std::to_string(itemsize) +
                                                      "-byte elements");
            if (!addressed_bytes(t.data_type, dims, strides, t.rank(), 1, &extent)) extent = -1;
        }
        Span sp;
        if (span_at(b.ptr, extent, index, is_written, dims, strides, static_cast<uint32_t>(t.rank()), itemsize, &sp))
            add_span(s.spans, &written, sp);
        if (b.sized) {
            if (d.location == kLocationHost && b.on_device) {
                return raise(kInvalidValue, t.label + ": device memory handed to engine " +
                                                std::to_string(d.engine_id) +
                                                ", which runs on the host; to run on a GPU, build the graph on "
                                                "hipdnn.Handle(device=\"cuda\") (or \"hip\")");
            }
            if (d.location == kLocationDevice && !b.on_device) {
                return raise(kInvalidValue, t.label + ": host memory handed to engine " +
                                                std::to_string(d.engine_id) +
                                                ", which runs on a GPU; copy it to the device first, or build the "
                                                "graph on hipdnn.Handle(device=\"cpu\") to run on the host");
            }
        }
        hipdnnPluginDeviceBuffer_t pb;
        pb.uid = uid;
        pb.ptr = reinterpret_cast<void*>(b.ptr);
        s.buffers.push_back(pb);
    }
    std::string missing;
    for (size_t t = 0; t < nt; ++t) {
        const TensorSpec& ts = d.tensors[t];
        if (!ts.is_virtual && !s.seen[t]) {
            if (!missing.empty()) missing += ", ";
            missing += quoted(ts.name) + " (uid " + std::to_string(ts.uid) + ")";
        }
    }
    if (!missing.empty()) return raise(kInvalidVariantPack, "no buffer for tensor(s) " + missing);
    uint64_t ws = 0;
    if (!read_workspace(d, workspace, stream, s, &ws)) return nullptr;
    Span wsp;
    if (ws && d.workspace_size &&
        span_at(ws, static_cast<int64_t>(std::min<uint64_t>(d.workspace_size, INT64_MAX)), -1, true, nullptr, nullptr,
                0, 1, &wsp))
        add_span(s.spans, &written, wsp);
    Span first, second;
    if (find_alias(s.spans.data(), s.spans.size(), written, &first, &second)) return raise_alias(d, first, second);

    s.lengths.resize(o.size());
    s.shape_ptrs.resize(o.size());
    s.stride_ptrs.resize(o.size());
    for (size_t k = 0; k < o.size(); ++k) {
        s.lengths[k] = static_cast<uint32_t>(o.shapes[k].size());
        s.shape_ptrs[k] = o.shapes[k].data();
        s.stride_ptrs[k] = o.strides[k].data();
    }
    CallArgs a;
    a.workspace = reinterpret_cast<void*>(ws);
    a.buffers = s.buffers.data();
    a.num_buffers = static_cast<uint32_t>(s.buffers.size());
    a.num_overrides = static_cast<uint32_t>(o.size());
    a.override_uids = o.uids.data();
    a.lengths = s.lengths.data();
    a.shapes = s.shape_ptrs.data();
    a.strides = s.stride_ptrs.data();
    if (!reads.verify()) return nullptr;  // after the call's last Python code
    if (!enter(d) || !call_plugin(d, a)) return nullptr;
    Py_RETURN_NONE;
}

PyObject* Executor_get_plan(PyObject* self, void*) {
    PyObject* p = reinterpret_cast<PyObject*>(reinterpret_cast<Executor*>(self)->x->plan);
    Py_INCREF(p);
    return p;
}

PyMethodDef Executor_methods[] = {
    {"execute", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(Executor_execute)), METH_FASTCALL,
     "execute(variant_pack, workspace, override_uids, override_shapes, override_strides, overrides)"},
    {"bind", Executor_bind, METH_VARARGS, "bind(uids, override_uids) -> Binding"},
    {nullptr, nullptr, 0, nullptr},
};
PyGetSetDef Executor_getset[] = {
    {"plan", Executor_get_plan, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};
PyTypeObject ExecutorType = {PyVarObject_HEAD_INIT(nullptr, 0)};

bool ready_executor_type() {
    return ready(ExecutorType, "hipdnn.backend._execute_core.Executor", sizeof(Executor), Executor_dealloc,
                 Executor_new, Executor_methods, Executor_getset);
}

}  // namespace hipdnn_core
