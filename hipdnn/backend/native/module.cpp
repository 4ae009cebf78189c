// The compiled execute path (rfcs/0007-native-execute-core.md).
//
// Graph.execute, the bound call and the backend's descriptor execute all end here. Everything a
// call is checked against is frozen when the plan is built (the tensors as the serialized graph
// told the plugin, the plugin entries, the node shape rules), so a call only reads the caller's
// values, checks each rule once and calls the plugin with the GIL released.
//
// Objects:
//   Gate      one per backend handle: closed once, refused by every call after.
//   PlanCore  one per execution plan: plugin entries, context, tensor table, in-flight count.
//   Executor  one per built Graph: the keys (tensor objects) and node shape rules over a PlanCore.
//   Binding   one per Graph.bind: pointer order and override uids resolved once.
#include "core.h"

namespace hipdnn_core {

// ============================================================================================
// module functions
// ============================================================================================
PyObject* mod_configure(PyObject*, PyObject* args, PyObject* kwargs) {
    static const char* kw[] = {"error_type", "error_codes", "ndarray_type", "np_integer_type", "tensor_type",
                               "entry_type", "mapping_abc", "resolver", "refusal_logger", "dtype_names",
                               "itemsizes", "torch_test", "torch_dtype_info", nullptr};
    PyObject *et, *ec, *nd, *ni, *tt, *ent, *ma, *res, *rl, *names, *sizes, *tq, *tdi;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!OOOOOOOOOOO", const_cast<char**>(kw), &et, &PyDict_Type, &ec,
                                     &nd, &ni, &tt, &ent, &ma, &res, &rl, &names, &sizes, &tq, &tdi))
        return nullptr;
    PyObject** slots[] = {&g.error_type, &g.error_codes, &g.ndarray_type,   &g.np_integer_type,
                          &g.tensor_type, &g.entry_type, &g.mapping_abc,    &g.resolver,
                          &g.refusal_logger, &g.torch_test, &g.torch_dtype_info};
    PyObject* vals[] = {et, ec, nd, ni, tt, ent, ma, res, rl, tq, tdi};
    if (!g.torch_dtypes) g.torch_dtypes = PyDict_New();
    for (size_t i = 0; i < 11; ++i) {
        Py_XDECREF(*slots[i]);
        *slots[i] = vals[i] == Py_None ? nullptr : vals[i];
        Py_XINCREF(*slots[i]);
    }
    PyObject* fn = PySequence_Fast(names, "dtype_names must be a sequence");
    if (!fn) return nullptr;
    g.dtype_names.clear();
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fn); ++i) {
        const char* c = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(fn, i));
        if (!c) {
            Py_DECREF(fn);
            return nullptr;
        }
        g.dtype_names.push_back(c);
    }
    Py_DECREF(fn);
    std::vector<int64_t> s;
    if (!read_ints(sizes, s, "itemsizes")) return nullptr;
    g.itemsizes.assign(s.begin(), s.end());
    Py_RETURN_NONE;
}

// check_buffer(resolved, where, data_type, dims, strides, overridden): the buffer rule alone, for
// callers that hold a Resolved record (hipdnn.frontend.memory keeps its public helper on it).
PyObject* mod_check_buffer(PyObject*, PyObject* args) {
    PyObject *resolved, *dims, *strides;
    const char* where;
    int dt, overridden;
    if (!PyArg_ParseTuple(args, "OsiOOp", &resolved, &where, &dt, &dims, &strides, &overridden)) return nullptr;
    std::vector<int64_t> dv, sv;
    if (!read_ints(dims, dv, "dims") || !read_ints(strides, sv, "strides")) return nullptr;
    if (dv.size() != sv.size()) return raise(kInvalidValue, std::string(where) + ": dims and strides differ in rank");
    Buf b;
    if (resolved == Py_None) Py_RETURN_NONE;  // a bare pointer
    if (!buffer_from_record(resolved, where, b)) return nullptr;
    if (!check_buffer(b, where, dt, dv.data(), sv.data(), dv.size(), overridden != 0)) return nullptr;
    Py_RETURN_NONE;
}

// strides_overlap(dims, strides) -> bool: whether distinct indices share an element (layout_overlaps),
// for graph validation of the strides users declare on outputs: one rule, here and at execute.
PyObject* mod_strides_overlap(PyObject*, PyObject* args) {
    PyObject *dims, *strides;
    if (!PyArg_ParseTuple(args, "OO", &dims, &strides)) return nullptr;
    std::vector<int64_t> dv, sv;
    if (!read_ints(dims, dv, "dims") || !read_ints(strides, sv, "strides")) return nullptr;
    if (dv.size() != sv.size()) return raise(kInvalidValue, "dims and strides differ in rank");
    return PyBool_FromLong(layout_overlaps(dv.data(), sv.data(), dv.size()));
}

// elements_meet(ptr_a, itemsize_a, dims_a, strides_a, ptr_b, itemsize_b, dims_b, strides_b) -> bool:
// whether the two strided layouts (element strides, dims >= 1) share a byte: the aliasing rule's
// exact test, for tests to compare against brute force.
PyObject* mod_elements_meet(PyObject*, PyObject* args) {
    unsigned long long pa, pb;
    int ea, eb;
    PyObject *da, *sa, *db, *sb;
    if (!PyArg_ParseTuple(args, "KiOOKiOO", &pa, &ea, &da, &sa, &pb, &eb, &db, &sb)) return nullptr;
    std::vector<int64_t> dav, sav, dbv, sbv;
    if (!read_ints(da, dav, "dims_a") || !read_ints(sa, sav, "strides_a") || !read_ints(db, dbv, "dims_b") ||
        !read_ints(sb, sbv, "strides_b"))
        return nullptr;
    if (dav.size() != sav.size() || dbv.size() != sbv.size() || ea < 1 || eb < 1)
        return raise(kInvalidValue, "elements_meet: dims and strides differ in rank, or an item size is not positive");
    int64_t ba = 0, bb = 0;
    for (int64_t v : dav)
        if (v < 1) return raise(kInvalidValue, "elements_meet: dims must be >= 1");
    for (int64_t v : dbv)
        if (v < 1) return raise(kInvalidValue, "elements_meet: dims must be >= 1");
    if (!addressed_bytes(-1, dav.data(), sav.data(), dav.size(), ea, &ba) ||
        !addressed_bytes(-1, dbv.data(), sbv.data(), dbv.size(), eb, &bb))
        return raise(kInvalidValue, "elements_meet: a layout addresses more bytes than int64 can count");
    Span a, b;
    if (!span_at(pa, ba, 0, true, dav.data(), sav.data(), static_cast<uint32_t>(dav.size()), ea, &a) ||
        !span_at(pb, bb, 1, false, dbv.data(), sbv.data(), static_cast<uint32_t>(dbv.size()), eb, &b))
        return raise(kInvalidValue, "elements_meet: a layout runs past the end of the address space");
    return PyBool_FromLong(layouts_meet(a, b));
}

PyMethodDef module_methods[] = {
    {"elements_meet", mod_elements_meet, METH_VARARGS, "Whether two strided layouts share a byte (exact)."},
    {"configure", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(mod_configure)),
     METH_VARARGS | METH_KEYWORDS, "Hand the core the Python objects it needs (once, at import)."},
    {"check_buffer", mod_check_buffer, METH_VARARGS, "The buffer rule for one Resolved value."},
    {"thread_workspace", mod_thread_workspace, METH_O,
     "thread_workspace(size) -> int: this thread's 64-byte aligned workspace of at least size bytes"},
    {"strides_overlap", mod_strides_overlap, METH_VARARGS, "Whether distinct indices of a layout share an element."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_execute_core", "The compiled execute path.", -1, module_methods,
                          nullptr, nullptr, nullptr, nullptr};

bool ready(PyTypeObject& t, const char* name, size_t size, destructor dealloc, newfunc new_fn, PyMethodDef* methods,
           PyGetSetDef* getset) {
    t.tp_name = name;
    t.tp_basicsize = static_cast<Py_ssize_t>(size);
    t.tp_flags = Py_TPFLAGS_DEFAULT;
    t.tp_dealloc = dealloc;
    t.tp_new = new_fn;
    t.tp_methods = methods;
    t.tp_getset = getset;
    return PyType_Ready(&t) == 0;
}


}  // namespace hipdnn_core

using namespace hipdnn_core;

PyMODINIT_FUNC PyInit__execute_core(void) {
    g.str_shape = PyUnicode_InternFromString("shape");
    g.str_stride = PyUnicode_InternFromString("stride");
    g.str_name = PyUnicode_InternFromString("get_name");
    g.str_uid = PyUnicode_InternFromString("get_uid");
    g.str_dtype = PyUnicode_InternFromString("dtype");
    g.str_is_cuda = PyUnicode_InternFromString("is_cuda");
    g.str_is_cpu = PyUnicode_InternFromString("is_cpu");
    g.str_data_ptr = PyUnicode_InternFromString("data_ptr");
    g.str_stride_fn = PyUnicode_InternFromString("stride");
    if (!ready_plan_types() || !ready_executor_type() || !ready_binding_type() || !ready_sdpa_calls_type())
        return nullptr;
    PyObject* m = PyModule_Create(&module_def);
    if (!m) return nullptr;
    PyTypeObject* types[] = {&GateType, &PlanCoreType, &ExecutorType, &BindingType, &SdpaCallsType};
    const char* names[] = {"Gate", "PlanCore", "Executor", "Binding", "SdpaCalls"};
    for (int i = 0; i < 5; ++i) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(m, names[i], reinterpret_cast<PyObject*>(types[i])) != 0) {
            Py_DECREF(types[i]);
            Py_DECREF(m);
            return nullptr;
        }
    }
    return m;
}
