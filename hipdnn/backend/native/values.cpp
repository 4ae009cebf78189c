// Reading variant-pack values: numpy arrays through the buffer protocol, int pointers, torch tensors
// through their accessors, and everything else through hipdnn.backend.values.resolve.
#include "core.h"

namespace hipdnn_core {

// numpy's buffer-protocol format -> (DataType, name); only native byte order.
bool dtype_from_format(const char* fmt, Py_ssize_t itemsize, int* code, std::string* name) {
    if (!fmt) fmt = "B";
    if (*fmt == '@' || *fmt == '=' || *fmt == '<') ++fmt;  // '<' is native on the platforms we build for
    if (fmt[0] == '\0' || fmt[1] != '\0') return false;
    switch (fmt[0]) {
        case 'f': *code = 1; *name = "float32"; return itemsize == 4;
        case 'e': *code = 2; *name = "float16"; return itemsize == 2;
        case 'd': *code = 4; *name = "float64"; return itemsize == 8;
        case 'B': *code = 5; *name = "uint8"; return itemsize == 1;
        case 'b': *code = 7; *name = "int8"; return itemsize == 1;
        case 'i': case 'l': case 'q':
            if (itemsize == 4) { *code = 6; *name = "int32"; return true; }
            if (itemsize == 8) { *code = 15; *name = "int64"; return true; }
            return false;
        case 'h': *code = -1; *name = "int16"; return itemsize == 2;
        case 'H': *code = -1; *name = "uint16"; return itemsize == 2;
        case 'I': case 'L': case 'Q':
            *code = -1; *name = "uint" + std::to_string(itemsize * 8); return true;
        case '?': *code = -1; *name = "bool"; return true;
        case 'g': *code = -1; *name = "float128"; return true;
        default: return false;
    }
}

// (low, high) byte offsets from the pointer to the first byte and one past the last one a strided
// view covers; false when that leaves int64 (only a view no allocation holds gets there).
bool byte_extent(const int64_t* shape, const int64_t* byte_strides, size_t nd, int64_t itemsize, int64_t* low,
                 int64_t* high) {
    *low = 0;
    *high = itemsize;
    for (size_t i = 0; i < nd; ++i) {
        if (shape[i] == 0) {
            *low = *high = 0;
            return true;
        }
    }
    for (size_t i = 0; i < nd; ++i) {
        int64_t span = 0;
        if (__builtin_mul_overflow(shape[i] - 1, byte_strides[i], &span)) return false;
        if (__builtin_add_overflow(span < 0 ? *low : *high, span, span < 0 ? low : high)) return false;
    }
    return true;
}

// ptr + offset as an address; false when it leaves [0, 2**64).
bool offset_address(uint64_t ptr, int64_t offset, uint64_t* out) {
    if (offset >= 0) return !__builtin_add_overflow(ptr, static_cast<uint64_t>(offset), out);
    uint64_t back = static_cast<uint64_t>(-(offset + 1)) + 1;
    if (back > ptr) return false;
    *out = ptr - back;
    return true;
}

// Fills the extent, contiguity and element strides of `b` from its byte strides. Strides that are
// not whole elements (on an axis of more than one element) are refused: the engines index by element.
bool layout_from_bytes(Buf& b, const int64_t* byte_strides, const std::string& label) {
    size_t nd = b.shape.size();
    int64_t itemsize = b.itemsize;
    if (itemsize < 1 || itemsize > kMaxItemsize) {
        raise(kInvalidVariantPack, label + ": element size " + std::to_string(itemsize) + " is not one of any type");
        return false;
    }
    b.strides.resize(nd);
    b.strides_known = true;
    bool c_contig = true;
    int64_t expect = itemsize;
    // element sizes are powers of two in practice: a shift and a mask instead of two divisions per axis
    const bool pow2 = (itemsize & (itemsize - 1)) == 0;
    const int shift = pow2 ? __builtin_ctzll(static_cast<unsigned long long>(itemsize)) : 0;
    for (size_t i = nd; i-- > 0;) {
        int64_t s = byte_strides[i], dim = b.shape[i];
        int64_t rem = pow2 ? (s & (itemsize - 1)) : s % itemsize;
        if (dim > 1 && rem != 0) {
            raise(kInvalidVariantPack, label + ": byte strides " + list_str(byte_strides, nd) + " are not whole " +
                                           std::to_string(itemsize) + "-byte elements; engines index by element");
            return false;
        }
        b.strides[i] = pow2 ? s >> shift : s / itemsize;  // arithmetic shift: exact for whole (and negative) strides
        if (dim != 1 && s != expect) c_contig = false;
        if (__builtin_mul_overflow(expect, dim < 1 ? 1 : dim, &expect)) expect = INT64_MAX;
    }
    int64_t low = 0, high = 0;
    if (!byte_extent(b.shape.data(), byte_strides, nd, itemsize, &low, &high) || !offset_address(b.ptr, low, &b.low) ||
        !offset_address(b.ptr, high, &b.high)) {
        raise(kInvalidVariantPack, label + ": shape " + list_str(b.shape) + " with byte strides " +
                                       list_str(byte_strides, nd) + " from pointer " + std::to_string(b.ptr) +
                                       " reaches outside the address space");
        return false;
    }
    b.contiguous = c_contig && b.low == b.ptr;
    return true;
}

// numpy ndarray through the buffer protocol; the view is kept in `holds` until the plugin returns.
// Returns 1 done, 0 not handled (caller resolves in Python), -1 error set.
int buffer_from_ndarray(PyObject* value, const std::string& label, Buf& b, Holds& holds) {
    Py_buffer view;
    if (PyObject_GetBuffer(value, &view, PyBUF_RECORDS_RO) != 0) {
        PyErr_Clear();
        return 0;
    }
    int code = 0;
    std::string name;
    if (!dtype_from_format(view.format, view.itemsize, &code, &name) || view.itemsize <= 0) {
        PyBuffer_Release(&view);
        return 0;
    }
    if (holds.views.size() < holds.views.capacity()) {
        holds.views.push_back(view);
    } else {
        PyBuffer_Release(&view);  // the array itself is held; only a pack larger than the plan gets here
        holds.keep(value);
    }
    b.sized = true;
    b.readonly = view.readonly != 0;
    b.ptr = reinterpret_cast<uint64_t>(view.buf);
    b.dtype_code = code;
    b.dtype_name = name;
    b.itemsize = static_cast<int>(view.itemsize);
    size_t nd = static_cast<size_t>(view.ndim);
    b.shape.assign(view.shape, view.shape + nd);
    SmallVec<int64_t, 16> byte_strides(nd);
    for (size_t i = 0; i < nd; ++i) byte_strides[i] = view.strides[i];
    return layout_from_bytes(b, byte_strides.data(), label) ? 1 : -1;
}

bool pointer_from_int(PyObject* value, const std::string& label, Buf& b) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
    unsigned long long u = 0;
    if (overflow > 0) {
        u = PyLong_AsUnsignedLongLong(value);
        if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
            PyErr_Clear();
            raise(kInvalidVariantPack, label + ": pointer " + py_repr(value) + " is not a valid address");
            return false;
        }
    } else if (overflow < 0 || v <= 0) {
        if (PyErr_Occurred()) PyErr_Clear();
        raise(kInvalidVariantPack, label + ": pointer " + py_repr(value) + " is not a valid address");
        return false;
    } else {
        u = static_cast<unsigned long long>(v);
    }
    b.ptr = u;
    b.sized = false;
    return true;
}

// A Resolved record (hipdnn.backend.values.Resolved: ptr, low, high, dtype code, dtype name, item size,
// shape, element strides, contiguous, on device, release, read-only) -> Buf.
constexpr Py_ssize_t kResolvedFields = 12;

bool buffer_from_record(PyObject* r, const std::string& label, Buf& b) {
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != kResolvedFields) {
        raise(kInvalidVariantPack, label + ": the value resolver returned " + py_repr(r) + ", not a Resolved record");
        return false;
    }
    b.sized = true;
    b.ptr = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(r, 0));
    b.low = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(r, 1));
    b.high = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(r, 2));
    b.dtype_code = static_cast<int>(PyLong_AsLong(PyTuple_GET_ITEM(r, 3)));
    const char* name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(r, 4));
    b.dtype_name = name ? name : "";
    long itemsize = PyLong_AsLong(PyTuple_GET_ITEM(r, 5));
    // out of int's range: kept as 0 (refused below), never truncated into a plausible size
    b.itemsize = itemsize >= 1 && itemsize <= kMaxItemsize ? static_cast<int>(itemsize) : 0;
    if (PyErr_Occurred())
        return as_hipdnn_error(kInvalidVariantPack, label + ": the buffer's pointer or extent is not an address");
    if (!read_ints(PyTuple_GET_ITEM(r, 6), b.shape, label + ": shape")) return false;
    PyObject* strides = PyTuple_GET_ITEM(r, 7);
    if (strides == Py_None) {
        raise(kInvalidVariantPack, label + ": the buffer's strides are not whole elements");
        return false;
    }
    b.strides_known = true;
    if (!read_ints(strides, b.strides, label + ": strides")) return false;
    if (b.strides.size() != b.shape.size()) {
        raise(kInvalidVariantPack, label + ": shape " + list_str(b.shape) + " and strides " + list_str(b.strides) +
                                       " differ in rank");
        return false;
    }
    b.contiguous = PyObject_IsTrue(PyTuple_GET_ITEM(r, 8)) == 1;
    b.on_device = PyObject_IsTrue(PyTuple_GET_ITEM(r, 9)) == 1;
    b.readonly = PyObject_IsTrue(PyTuple_GET_ITEM(r, 11)) == 1;
    if (b.itemsize <= 0) {
        raise(kInvalidVariantPack, label + ": element size " + std::to_string(itemsize) + " is not one of any type");
        return false;
    }
    return !PyErr_Occurred();
}

// A value the core does not read itself goes through hipdnn.backend.values.resolve.
bool buffer_from_resolver(PyObject* value, const std::string& label, uint64_t stream, Buf& b,
                          std::vector<PyObject*>& releases) {
    PyObject* lab = PyUnicode_FromStringAndSize(label.data(), static_cast<Py_ssize_t>(label.size()));
    if (!lab) return false;
    PyObject* st = PyLong_FromUnsignedLongLong(stream);
    PyObject* r = st ? PyObject_CallFunctionObjArgs(g.resolver, value, lab, st, nullptr) : nullptr;
    Py_DECREF(lab);
    Py_XDECREF(st);
    if (!r) return false;
    // the release runs even when the record is unusable: a consumed capsule must be freed
    if (PyTuple_Check(r) && PyTuple_GET_SIZE(r) == kResolvedFields && PyTuple_GET_ITEM(r, 10) != Py_None) {
        Py_INCREF(PyTuple_GET_ITEM(r, 10));
        releases.push_back(PyTuple_GET_ITEM(r, 10));
    }
    bool ok = buffer_from_record(r, label, b);
    Py_DECREF(r);
    return ok;
}

// Whether values of this type are torch tensors: asked of Python once per type, then cached here.
int is_torch(PyObject* value) {
    if (!g.torch_test) return 0;
    PyTypeObject* tp = Py_TYPE(value);
    auto it = g.torch_types.find(tp);
    if (it != g.torch_types.end()) return it->second ? 1 : 0;
    PyObject* r = PyObject_CallOneArg(g.torch_test, value);
    if (!r) return -1;
    int verdict = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (verdict < 0) return -1;
    if (g.torch_types.size() < 4096) {
        Py_INCREF(reinterpret_cast<PyObject*>(tp));
        g.held_types.push_back(reinterpret_cast<PyObject*>(tp));
        g.torch_types[tp] = verdict != 0;
    }
    return verdict;
}

// The (code, name, item size) record of a dtype object, from the cache (filled through
// values.torch_dtype_info as dtypes are met, at most kMaxDtypes of them): a new reference, or null
// with an exception set. A new reference: Python code run later (a hostile dtype's __eq__, a nested
// call) may replace the cache's entry and free the record while its name is still being read.
constexpr Py_ssize_t kMaxDtypes = 1024;

PyObject* dtype_record(PyObject* dtype) {
    PyObject* info = PyDict_GetItemWithError(g.torch_dtypes, dtype);  // borrowed
    if (info) {
        Py_INCREF(info);
        return info;
    }
    if (PyErr_Occurred()) return nullptr;
    if (!g.torch_dtype_info) {
        PyErr_SetString(PyExc_TypeError, "no dtype reader configured");
        return nullptr;
    }
    PyObject* fresh = PyObject_CallOneArg(g.torch_dtype_info, dtype);
    if (fresh && PyDict_GET_SIZE(g.torch_dtypes) < kMaxDtypes && PyDict_SetItem(g.torch_dtypes, dtype, fresh) != 0)
        Py_CLEAR(fresh);
    return fresh;
}

thread_local TorchReadScope* tl_torch_reads = nullptr;

constexpr size_t kLoggedRank = 8;
struct TorchRead {
    PyObject* t;        // borrowed: the call holds it (its pack's snapshot, call_tensors' tuple)
    const char* label;  // the tensor's, in the plan (or a literal)
    uint64_t ptr;
    size_t rank;  // > kLoggedRank: the pointer alone is compared
    int64_t shape[kLoggedRank];
    int64_t strides[kLoggedRank];
};
// The thread's log of torch reads, a stack of the nested scopes' entries (kept: no allocation per
// call once warm).
thread_local std::vector<TorchRead> tl_torch_log;

TorchReadScope::TorchReadScope() : first(tl_torch_log.size()), outer(tl_torch_reads) { tl_torch_reads = this; }

void torch_reads_log(PyObject* t, const char* label, uint64_t ptr, const int64_t* shape, const int64_t* strides,
                     size_t rank) {
    if (!tl_torch_reads) return;
    TorchRead r;
    r.t = t;
    r.label = label;
    r.ptr = ptr;
    r.rank = rank;
    for (size_t k = 0; k < rank && k < kLoggedRank; ++k) {
        r.shape[k] = shape[k];
        r.strides[k] = strides[k];
    }
    tl_torch_log.push_back(r);
}

namespace {
// 1 when a torch function mode is active on this thread, 0 when none, -1 with an exception set.
int function_mode_active() {
    PyObject* on = PyObject_CallNoArgs(g.torch_modes);
    int active = on ? PyObject_IsTrue(on) : -1;
    Py_XDECREF(on);
    return active;
}

// Enters DisableTorchFunction for the scope (until it ends). False with an exception set.
bool enter_no_modes(TorchReadScope& scope) {
    PyObject* ctx = PyObject_CallNoArgs(g.torch_no_modes);
    PyObject* r = ctx ? PyObject_CallMethod(ctx, "__enter__", nullptr) : nullptr;
    if (!r) {
        Py_XDECREF(ctx);
        return false;
    }
    Py_DECREF(r);
    scope.entered = ctx;
    return true;
}

// 1 when v is a tuple (torch.Size, or stride()'s) of exactly the ints want[0..rank), else 0; runs no
// Python code and sets no exception.
int same_ints(PyObject* v, const int64_t* want, size_t rank) {
    if (!PyTuple_Check(v)) return 0;
    if (static_cast<size_t>(PyTuple_GET_SIZE(v)) != rank) return 0;
    for (size_t k = 0; k < rank && k < kLoggedRank; ++k) {
        PyObject* item = PyTuple_GET_ITEM(v, static_cast<Py_ssize_t>(k));
        if (!PyLong_CheckExact(item)) return 0;
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (overflow || x != want[k]) return 0;
    }
    return 1;
}
}  // namespace

bool TorchReadScope::verify() {
    if (tl_torch_log.size() <= first || !g.base_data_ptr) return true;
    bool subclass = false;
    for (size_t i = first; i < tl_torch_log.size(); ++i)
        subclass = subclass || reinterpret_cast<PyObject*>(Py_TYPE(tl_torch_log[i].t)) != g.torch_tensor;
    // A subclass's __torch_function__ would run on torch's own accessors too, and so would a mode the
    // call's Python code entered since its first torch tensor: both off (an exact tensor under no mode
    // runs no code).
    if (!entered && !subclass) {
        int active = function_mode_active();
        if (active < 0) return as_hipdnn_error(kInvalidVariantPack, "cannot read torch's mode state");
        subclass = active != 0;
    }
    if (!entered && subclass && !enter_no_modes(*this))
        return as_hipdnn_error(kInvalidVariantPack, "cannot turn torch's function modes off to check the tensors");
    descrgetfunc shape_of = Py_TYPE(g.base_shape)->tp_descr_get;
    for (size_t i = first; i < tl_torch_log.size(); ++i) {
        const TorchRead r = tl_torch_log[i];  // (a copy: nothing below runs code that logs, but cheap)
        PyObject* p = PyObject_CallOneArg(g.base_data_ptr, r.t);
        bool same = p && PyLong_Check(p) && PyLong_AsUnsignedLongLong(p) == r.ptr && !PyErr_Occurred();
        Py_XDECREF(p);
        if (same && r.rank <= kLoggedRank) {
            PyObject* shape = shape_of ? shape_of(g.base_shape, r.t, reinterpret_cast<PyObject*>(Py_TYPE(r.t))) : nullptr;
            same = shape && same_ints(shape, r.shape, r.rank) == 1;
            Py_XDECREF(shape);
            if (same) {
                PyObject* strides = PyObject_CallOneArg(g.base_stride, r.t);
                same = strides && same_ints(strides, r.strides, r.rank) == 1;
                Py_XDECREF(strides);
            }
        }
        if (!same) {
            PyErr_Clear();
            raise(kInvalidVariantPack, std::string(r.label) +
                                           ": the torch tensor changed while the call's other values were read (code "
                                           "they ran moved, resized or freed it); nothing was run");
            return false;
        }
    }
    return true;
}

TorchReadScope::~TorchReadScope() {
    tl_torch_log.resize(first);
    if (entered) {
        PyObject *type, *value, *trace;
        PyErr_Fetch(&type, &value, &trace);  // the call's own error, if any, stays the one raised
        PyObject* r = PyObject_CallMethod(entered, "__exit__", "OOO", Py_None, Py_None, Py_None);
        if (r) Py_DECREF(r);
        else PyErr_WriteUnraisable(entered);
        Py_DECREF(entered);
        PyErr_Restore(type, value, trace);
    }
    tl_torch_reads = outer;
}

bool torch_reads_begin() {
    TorchReadScope* scope = tl_torch_reads;
    if (!scope || scope->checked) return true;
    scope->checked = true;
    if (!g.torch_modes_looked) {
        g.torch_modes_looked = true;
        PyObject* c = PyImport_ImportModule("torch._C");  // loaded already: a torch tensor was met
        if (c) {
            g.torch_modes = PyObject_GetAttrString(c, "_is_torch_function_mode_enabled");
            g.torch_no_modes = PyObject_GetAttrString(c, "DisableTorchFunction");
            PyObject* base = PyObject_GetAttrString(c, "TensorBase");
            if (base) {
                g.base_data_ptr = PyObject_GetAttrString(base, "data_ptr");
                g.base_stride = PyObject_GetAttrString(base, "stride");
                g.base_shape = PyObject_GetAttrString(base, "shape");
                Py_DECREF(base);
            }
            Py_DECREF(c);
        }
        PyObject* torch = PyImport_ImportModule("torch");
        if (torch) {
            g.torch_tensor = PyObject_GetAttrString(torch, "Tensor");
            Py_DECREF(torch);
        }
        if (!g.torch_modes || !g.torch_no_modes) {  // a torch without modes: nothing to guard against
            Py_CLEAR(g.torch_modes);
            Py_CLEAR(g.torch_no_modes);
        }
        if (!g.torch_no_modes || !g.base_data_ptr || !g.base_stride || !g.base_shape ||
            !Py_TYPE(g.base_shape)->tp_descr_get) {  // (torch before 2.0: no second read)
            Py_CLEAR(g.base_data_ptr);
            Py_CLEAR(g.base_stride);
            Py_CLEAR(g.base_shape);
        }
        PyErr_Clear();
    }
    if (!g.torch_modes) return true;
    int active = function_mode_active();
    if (active <= 0) return active == 0;
    return enter_no_modes(*scope);
}

// A torch tensor through its accessors (torch refuses __cuda_array_interface__ for bfloat16, and CPU
// tensors have no array interface). Returns 1 done, 0 not handled (Python resolves it), -1 error.
int buffer_from_torch(PyObject* value, Buf& b) {
    if (!torch_reads_begin()) return -1;
    PyObject* dtype = PyObject_GetAttr(value, g.str_dtype);
    if (!dtype) return -1;
    PyObject* info = dtype_record(dtype);
    Py_DECREF(dtype);
    if (!info) return -1;
    long code, itemsize;
    const char* name;
    bool parsed = PyArg_ParseTuple(info, "lsl", &code, &name, &itemsize);
    if (parsed) b.dtype_name = name;
    Py_DECREF(info);
    if (!parsed) return -1;
    // An element size no element type has (a foreign dtype's `itemsize` says anything): the Python
    // reader asks the tensor's element_size() and names the problem.
    if (itemsize < 1 || itemsize > kMaxItemsize) return 0;
    PyObject* cuda = PyObject_GetAttr(value, g.str_is_cuda);
    int on_device = cuda ? PyObject_IsTrue(cuda) : -1;
    Py_XDECREF(cuda);
    if (on_device < 0) return -1;
    if (!on_device) {
        PyObject* cpu = PyObject_GetAttr(value, g.str_is_cpu);
        int host = cpu ? PyObject_IsTrue(cpu) : -1;
        Py_XDECREF(cpu);
        if (host <= 0) {
            PyErr_Clear();
            return 0;  // another device (or an old torch): Python names the problem
        }
    }
    PyObject* ptr = PyObject_CallMethodNoArgs(value, g.str_data_ptr);
    if (!ptr) return -1;
    b.ptr = PyLong_AsUnsignedLongLong(ptr);
    Py_DECREF(ptr);
    if (PyErr_Occurred()) return -1;
    PyObject* shape = PyObject_GetAttr(value, g.str_shape);
    bool ok = shape && read_ints(shape, b.shape, "torch tensor shape");
    Py_XDECREF(shape);
    if (!ok) return -1;
    PyObject* strides = PyObject_CallMethodNoArgs(value, g.str_stride_fn);
    ok = strides && read_ints(strides, b.strides, "torch tensor strides");
    Py_XDECREF(strides);
    if (!ok || b.strides.size() != b.shape.size()) return ok ? 0 : -1;
    b.sized = true;
    b.on_device = on_device != 0;
    b.dtype_code = static_cast<int>(code);
    b.itemsize = static_cast<int>(itemsize);
    for (int64_t dim : b.shape)
        if (dim < 0) return 0;  // not a tensor: the Python reader names it
    SmallVec<int64_t, 16> byte_strides(b.strides.size());
    for (size_t k = 0; k < b.strides.size(); ++k)
        if (__builtin_mul_overflow(b.strides[k], int64_t{b.itemsize}, &byte_strides[k])) return 0;
    return layout_from_bytes(b, byte_strides.data(), "torch tensor") ? 1 : -1;
}

// Reads one variant-pack value into `b`.
bool read_value_raw(PyObject* value, const std::string& label, uint64_t stream, Buf& b,
                    std::vector<PyObject*>& releases, Holds& holds) {
    if (PyLong_Check(value) && !PyBool_Check(value)) return pointer_from_int(value, label, b);
    if (g.ndarray_type && PyObject_TypeCheck(value, reinterpret_cast<PyTypeObject*>(g.ndarray_type))) {
        int done = buffer_from_ndarray(value, label, b, holds);
        if (done != 0) return done > 0;
    } else if (g.np_integer_type && PyObject_TypeCheck(value, reinterpret_cast<PyTypeObject*>(g.np_integer_type))) {
        PyObject* idx = PyNumber_Index(value);
        if (!idx) return raise_chained(kInvalidVariantPack, label + ": pointer " + py_repr(value) + " is not an int"), false;
        bool ok = pointer_from_int(idx, label, b);
        Py_DECREF(idx);
        return ok;
    } else {
        int torch = is_torch(value);
        if (torch < 0) return raise_chained(kInvalidVariantPack, label + ": cannot tell what kind of buffer it is"), false;
        if (torch) {
            int done = buffer_from_torch(value, b);
            if (done > 0) {
                torch_reads_log(value, label.c_str(), b.ptr, b.shape.data(), b.strides.data(), b.shape.size());
                return true;
            }
            // a hostile or broken tensor: let the Python reader name what failed
            if (done < 0) PyErr_Clear();
            b.reset();
        }
    }
    return buffer_from_resolver(value, label, stream, b, releases);
}

// Every refusal is a HipdnnError naming `label`: an exception a foreign object raises while it is
// read is chained to one.
bool read_value(PyObject* value, const std::string& label, uint64_t stream, Buf& b, std::vector<PyObject*>& releases,
                Holds& holds) {
    if (read_value_raw(value, label, stream, b, releases, holds)) return true;
    as_hipdnn_error(kInvalidVariantPack, label + ": cannot read the buffer");
    return false;
}

void run_releases(std::vector<PyObject*>& releases) {
    // Called with any pending exception saved: a release failing must not mask the call's outcome.
    for (PyObject* r : releases) {
        PyObject *type, *val, *tb;
        PyErr_Fetch(&type, &val, &tb);
        PyObject* res = PyObject_CallNoArgs(r);
        if (!res) PyErr_WriteUnraisable(r);
        Py_XDECREF(res);
        PyErr_Restore(type, val, tb);
        Py_DECREF(r);
    }
    releases.clear();
}

}  // namespace hipdnn_core
