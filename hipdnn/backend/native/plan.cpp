// Gate (one per backend handle) and PlanCore (one per execution plan, with the descriptor execute).
#include "core.h"

#include <chrono>
#include <thread>

namespace hipdnn_core {

// ============================================================================================
// Gate
// ============================================================================================
PyObject* Gate_new(PyTypeObject* type, PyObject*, PyObject*) {
    Gate* self = reinterpret_cast<Gate*>(type->tp_alloc(type, 0));
    if (self) new (&self->closed) std::atomic<int>(0);
    return reinterpret_cast<PyObject*>(self);
}

PyObject* Gate_close(PyObject* self, PyObject*) {
    reinterpret_cast<Gate*>(self)->closed.store(1);
    Py_RETURN_NONE;
}

PyObject* Gate_get_closed(PyObject* self, void*) {
    return PyBool_FromLong(reinterpret_cast<Gate*>(self)->closed.load());
}

PyMethodDef Gate_methods[] = {
    {"close", Gate_close, METH_NOARGS, "Refuse every later call of the handle's plans."},
    {nullptr, nullptr, 0, nullptr},
};
PyGetSetDef Gate_getset[] = {
    {"closed", Gate_get_closed, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyTypeObject GateType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// ============================================================================================
// PlanCore
// ============================================================================================
void PlanCore_dealloc(PyObject* self) {
    PlanCore* p = reinterpret_cast<PlanCore*>(self);
    if (p->d) {
        Py_XDECREF(reinterpret_cast<PyObject*>(p->d->gate));
        delete p->d;
    }
    Py_TYPE(self)->tp_free(self);
}

// PlanCore(gate, entries=(plain, with_overrides or 0, last_error), plugin_handle, context,
//          workspace_size, location, override_enabled, override_refusal, graph_name, plugin_name,
//          engine_id, tensors=[(uid, name, data_type, dims, strides, is_virtual, is_dynamic), ...])
PyObject* PlanCore_new(PyTypeObject* type, PyObject* args, PyObject*) {
    PyObject *gate, *entries, *tensors;
    unsigned long long plugin_handle, context, workspace;
    int location, override_enabled;
    // Names are s# (pointer and length): a graph buffer may carry a NUL inside one, which "s" refuses.
    const char *refusal, *graph_name, *plugin_name;
    Py_ssize_t refusal_len, graph_name_len, plugin_name_len;
    long long engine_id;
    if (!PyArg_ParseTuple(args, "O!OKKKips#s#s#LO", &GateType, &gate, &entries, &plugin_handle, &context, &workspace,
                          &location, &override_enabled, &refusal, &refusal_len, &graph_name, &graph_name_len,
                          &plugin_name, &plugin_name_len, &engine_id, &tensors))
        return nullptr;
    unsigned long long plain = 0, with_overrides = 0, last_error = 0;
    if (!PyArg_ParseTuple(entries, "KKK", &plain, &with_overrides, &last_error)) return nullptr;
    if (!plain) {
        PyErr_SetString(PyExc_ValueError, "the plain execute entry is required");
        return nullptr;
    }
    PlanCore* self = reinterpret_cast<PlanCore*>(type->tp_alloc(type, 0));
    if (!self) return nullptr;
    auto* d = new PlanData();
    self->d = d;
    Py_INCREF(gate);
    d->gate = reinterpret_cast<Gate*>(gate);
    d->plain = reinterpret_cast<ExecuteFn>(plain);
    d->with_overrides = reinterpret_cast<ExecuteOverridesFn>(with_overrides);
    d->last_error = reinterpret_cast<LastErrorFn>(last_error);
    d->plugin_handle = reinterpret_cast<hipdnnEnginePluginHandle_t>(plugin_handle);
    d->context = reinterpret_cast<hipdnnEnginePluginExecutionContext_t>(context);
    d->workspace_size = workspace;
    d->location = location;
    d->override_enabled = override_enabled != 0;
    d->override_refusal.assign(refusal, static_cast<size_t>(refusal_len));
    if (d->override_refusal.empty() && !d->with_overrides) d->override_refusal = "the plugin has no override entry";
    d->graph_name.assign(graph_name, static_cast<size_t>(graph_name_len));
    d->plugin_name.assign(plugin_name, static_cast<size_t>(plugin_name_len));
    d->engine_id = engine_id;
    // A private tuple: reading the dims runs their __index__, which may empty the caller's list; the
    // entries (and the names read from them) must outlive that.
    PyObject* fast = PySequence_Tuple(tensors);
    if (!fast) {
        Py_DECREF(self);
        return nullptr;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(fast);
    d->tensors.resize(static_cast<size_t>(n));
    for (Py_ssize_t i = 0; i < n; ++i) {
        TensorSpec& t = d->tensors[static_cast<size_t>(i)];
        PyObject *dims, *strides;
        const char* name;
        Py_ssize_t name_len;
        long long uid;
        int dt, virt, dyn;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(fast, i), "Ls#iOOpp", &uid, &name, &name_len, &dt, &dims,
                              &strides, &virt, &dyn) ||
            !read_ints(dims, t.dims, "dims") || !read_ints(strides, t.strides, "strides")) {
            Py_DECREF(fast);
            Py_DECREF(self);
            return nullptr;
        }
        t.uid = uid;
        t.name.assign(name, static_cast<size_t>(name_len));
        t.label = "tensor " + quoted(t.name) + " (uid " + std::to_string(uid) + ")";
        t.data_type = dt;
        t.is_virtual = virt != 0;
        t.is_dynamic = dyn != 0;
        if (t.dims.size() != t.strides.size()) {
            Py_DECREF(fast);
            Py_DECREF(self);
            PyErr_SetString(PyExc_ValueError, "dims and strides differ in rank");
            return nullptr;
        }
        // Outermost first: larger stride (or axis-order value) first, ties by axis index.
        t.outer_first.resize(t.rank());
        for (size_t a = 0; a < t.rank(); ++a) t.outer_first[a] = static_cast<int>(a);
        std::stable_sort(t.outer_first.begin(), t.outer_first.end(),
                         [&t](int x, int y) { return t.strides[static_cast<size_t>(x)] > t.strides[static_cast<size_t>(y)]; });
        bool wildcard = std::find(t.dims.begin(), t.dims.end(), -1) != t.dims.end();
        int64_t elems = -1;
        if (!t.is_dynamic && !wildcard && !addressed_elements(t.dims.data(), t.strides.data(), t.rank(), &elems))
            elems = -1;
        t.max_elements = (t.is_dynamic || wildcard) ? -1 : elems;
        if (t.is_dynamic && !t.is_virtual) d->has_dynamic = true;
        if (!t.is_virtual) ++d->overridable;
        d->by_uid[t.uid] = static_cast<int>(i);
    }
    Py_DECREF(fast);
    return reinterpret_cast<PyObject*>(self);
}

// release(): refuse new calls, wait for the calls in flight, then return (the caller destroys the
// context). Waiting from inside one of this plan's own calls would never end: refused.
PyObject* PlanCore_release(PyObject* self, PyObject*) {
    PlanData& d = *reinterpret_cast<PlanCore*>(self)->d;
    if (tl_executing == &d) {
        return raise(kInvalidValue, "the execution plan of graph " + quoted(d.graph_name) +
                                        " cannot be released from inside one of its own calls");
    }
    d.released.store(true);
    if (d.inflight.load() > 0) {
        Py_BEGIN_ALLOW_THREADS
        while (d.inflight.load() > 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

PyObject* PlanCore_get_inflight(PyObject* self, void*) {
    return PyLong_FromLongLong(reinterpret_cast<PlanCore*>(self)->d->inflight.load());
}
PyObject* PlanCore_get_released(PyObject* self, void*) {
    return PyBool_FromLong(reinterpret_cast<PlanCore*>(self)->d->released.load());
}
// The backend's descriptor execute: payload already flat (spec 4.3), pointers trusted as bare ints.
// execute_payload(uids, ptrs, workspace, override_uids, override_lengths, override_shapes, override_strides)
PyObject* PlanCore_execute_payload(PyObject* self, PyObject* args) {
    PlanData& d = *reinterpret_cast<PlanCore*>(self)->d;
    PyObject *uids, *ptrs, *o_uids, *o_lengths, *o_shapes, *o_strides;
    unsigned long long workspace;
    if (!PyArg_ParseTuple(args, "OOKOOOO", &uids, &ptrs, &workspace, &o_uids, &o_lengths, &o_shapes, &o_strides))
        return nullptr;
    std::vector<int64_t> u, p, ou, ol, os, ot;
    if (!read_ints(uids, u, "unique ids") || !read_ints(ptrs, p, "data pointers") ||
        !read_ints(o_uids, ou, "override uids") || !read_ints(o_lengths, ol, "override lengths") ||
        !read_ints(o_shapes, os, "override shapes") || !read_ints(o_strides, ot, "override strides"))
        return nullptr;
    if (u.size() != p.size()) return raise(kInvalidValue, "unique ids and data pointers differ in number");
    if (!check_override_count(d, ou.size(), "override uids")) return nullptr;
    OverrideSet o;
    o.reset(ou.size());
    size_t offset = 0;
    for (size_t i = 0; i < ou.size(); ++i) {
        int64_t n = i < ol.size() ? ol[i] : -1;
        if (n <= 0 || static_cast<uint64_t>(n) > os.size() - offset || static_cast<uint64_t>(n) > ot.size() - offset)
            return raise(kInvalidValue, "override lengths do not slice the flat shapes and strides");
        o.uids[i] = ou[i];
        auto it = d.by_uid.find(ou[i]);
        o.index[i] = it == d.by_uid.end() ? -1 : it->second;
        o.shapes[i].assign(os.begin() + static_cast<long>(offset), os.begin() + static_cast<long>(offset + n));
        o.strides[i].assign(ot.begin() + static_cast<long>(offset), ot.begin() + static_cast<long>(offset + n));
        offset += static_cast<size_t>(n);
    }
    if (o.size() && !d.override_refusal.empty()) return raise(kGraphNotSupported, d.override_refusal);
    if (o.size() && !d.override_enabled) {
        return raise(kInvalidValue, "override attributes on a plan whose graph was built without "
                                    "IS_OVERRIDE_SHAPE_ENABLED_EXT");
    }
    if (!check_overrides(d, o, false, nullptr)) return nullptr;
    if (d.workspace_size && !workspace)
        return raise(kInvalidValue, "the plan needs " + std::to_string(d.workspace_size) +
                                        " bytes of workspace; none given");
    std::vector<hipdnnPluginDeviceBuffer_t> buffers(u.size());
    for (size_t i = 0; i < u.size(); ++i) {
        buffers[i].uid = u[i];
        buffers[i].ptr = reinterpret_cast<void*>(static_cast<uint64_t>(p[i]));
    }
    std::vector<uint32_t> lengths(o.size());
    std::vector<const int64_t*> sp(o.size()), tp(o.size());
    for (size_t i = 0; i < o.size(); ++i) {
        lengths[i] = static_cast<uint32_t>(o.shapes[i].size());
        sp[i] = o.shapes[i].data();
        tp[i] = o.strides[i].data();
    }
    CallArgs a;
    a.workspace = reinterpret_cast<void*>(workspace);
    a.buffers = buffers.data();
    a.num_buffers = static_cast<uint32_t>(buffers.size());
    a.num_overrides = static_cast<uint32_t>(o.size());
    a.override_uids = o.uids.data();
    a.lengths = lengths.data();
    a.shapes = sp.data();
    a.strides = tp.data();
    if (!enter(d) || !call_plugin(d, a)) return nullptr;
    Py_RETURN_NONE;
}

PyMethodDef PlanCore_methods[] = {
    {"release", PlanCore_release, METH_NOARGS, "Refuse new calls and wait for those in flight."},
    {"execute_payload", PlanCore_execute_payload, METH_VARARGS, "Execute a flat backend payload."},
    {nullptr, nullptr, 0, nullptr},
};
PyObject* PlanCore_get_location(PyObject* self, void*) {
    return PyLong_FromLong(reinterpret_cast<PlanCore*>(self)->d->location);
}
int PlanCore_set_location(PyObject* self, PyObject* value, void*) {
    long v = value ? PyLong_AsLong(value) : -1;
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < kLocationUnknown || v > kLocationDevice) {
        PyErr_SetString(PyExc_ValueError, "location is 0 (unknown), 1 (host) or 2 (device)");
        return -1;
    }
    reinterpret_cast<PlanCore*>(self)->d->location = static_cast<int>(v);
    return 0;
}

PyGetSetDef PlanCore_getset[] = {
    {"location", PlanCore_get_location, PlanCore_set_location, nullptr, nullptr},
    {"inflight", PlanCore_get_inflight, nullptr, nullptr, nullptr},
    {"released", PlanCore_get_released, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};
PyTypeObject PlanCoreType = {PyVarObject_HEAD_INIT(nullptr, 0)};

bool ready_plan_types() {
    return ready(GateType, "hipdnn.backend._execute_core.Gate", sizeof(Gate), nullptr, Gate_new, Gate_methods,
                 Gate_getset) &&
           ready(PlanCoreType, "hipdnn.backend._execute_core.PlanCore", sizeof(PlanCore), PlanCore_dealloc,
                 PlanCore_new, PlanCore_methods, PlanCore_getset);
}

}  // namespace hipdnn_core
