// SdpaCalls: hipdnn.torch's commonest calls, attention on plain CPU tensors with no mask tensor or an
// attn_mask as models pass one, read and run here in one step (rfcs/0010-torch-integration.md, "The
// short path"). The Python side registers each plan it builds for such calls (its bound call, what it
// bakes in, its capacity); a call reads its tensors once, finds the plan, allocates the output through
// torch and runs the bound call's checked path (call_bound_read). Whatever it does not serve it leaves
// to the caller's general path, which builds plans, grows them and explains refusals.
#include <cmath>
#include <cstdlib>

#include "core.h"

namespace hipdnn_core {

namespace {

struct SdpaEntry {
    PyObject* binding = nullptr;  // strong references
    PyObject* dtype = nullptr;
    int64_t heads = 0, kv_heads = 0, head_dim = 0, value_dim = 0;
    double scale = 0.0;
    bool causal = false, bottom_right = false;
    long codes = 0;  // the inputs' axis orders: q's + 6 k's + 36 v's (plans.order_code)
    int64_t cap_b = 0, cap_sq = 0, cap_skv = 0;
    // the additive bias slot [B|1, Hq|1, Sq|1, Skv|1], when the kind has one: its element type (a
    // strong reference; null: no bias), whether it has a batch and a head axis, its axis order
    PyObject* bias_dtype = nullptr;
    bool bias_batched = false, bias_per_head = false;
    long bias_code = 0;

    // The same kind but for the bias slot, if any.
    bool same_core(const SdpaEntry& o) const {
        return dtype == o.dtype && heads == o.heads && kv_heads == o.kv_heads && head_dim == o.head_dim &&
               value_dim == o.value_dim && scale == o.scale && causal == o.causal && bottom_right == o.bottom_right &&
               codes == o.codes;
    }
    bool same_kind(const SdpaEntry& o) const {
        return same_core(o) && bias_dtype == o.bias_dtype &&
               (!bias_dtype || (bias_batched == o.bias_batched && bias_per_head == o.bias_per_head &&
                                bias_code == o.bias_code));
    }
    bool holds(int64_t b, int64_t sq, int64_t skv) const { return b <= cap_b && sq <= cap_sq && skv <= cap_skv; }
};

// The additive bias last made from a boolean mask, handed out again while the same tensor comes back
// unmodified for the same call shape: transformers gives one mask to every layer of a forward. The
// mask's version counter (bumped by every in-place change) is part of the key, and the mask is held
// by a weak reference whose callback drops the bias the moment the mask dies (a long context's bias
// must not outlive its mask), so a dead mask is never matched by a new tensor at its address.
struct MaskMemo {
    PyObject* ref = nullptr;   // weak reference to the mask (its callback clears the memo)
    PyObject* bias = nullptr;  // strong reference
    long long version = 0;
    uint64_t ptr = 0;
    int64_t shape[4] = {}, stride[4] = {}, scores[4] = {};
    PyObject* query_dtype = nullptr;  // borrowed: a torch dtype singleton
};

struct SdpaCallsData {
    std::vector<SdpaEntry> entries;
    PyObject* tensor_type = nullptr;     // torch.Tensor (exactly: subclasses take the general path)
    PyObject* empty_permuted = nullptr;  // torch.empty_permuted
    PyObject* grad_enabled = nullptr;    // torch.is_grad_enabled
    PyObject* function_modes = nullptr;  // torch._C._is_torch_function_mode_enabled
    PyObject* dispatch_depth = nullptr;  // torch._C._len_torch_dispatch_stack
    PyObject* device = nullptr;          // torch.device("cpu")
    PyObject* layouts = nullptr;         // plans.LAYOUTS: 6 axis orders, outermost first
    PyObject* kwnames = nullptr;         // ("dtype", "device")
    PyObject* to_bias = nullptr;         // to_bias(mask, query, b, hq, sq, skv): a boolean mask's additive bias
    PyObject* bool_dtype = nullptr;      // torch.bool
    PyObject* float32 = nullptr;         // torch.float32 (a float mask may be it whatever q's type)
    MaskMemo memo;
    long long hits = 0;
};

struct SdpaCalls {
    PyObject_HEAD
    SdpaCallsData* c;
    vectorcallfunc vectorcall;
};

void drop_entry(SdpaEntry& e) {
    Py_XDECREF(e.binding);
    Py_XDECREF(e.dtype);
    Py_XDECREF(e.bias_dtype);
}

void clear_entries(std::vector<SdpaEntry>& entries) {
    std::vector<SdpaEntry> old;
    old.swap(entries);  // emptied before any reference is dropped (a drop may run Python code)
    for (SdpaEntry& e : old) drop_entry(e);
}

void clear_memo(MaskMemo& m) {
    PyObject* ref = m.ref;
    PyObject* bias = m.bias;
    m.ref = m.bias = nullptr;  // cleared before the drops, which may run Python code
    Py_XDECREF(ref);
    Py_XDECREF(bias);
}

// The workspace of calls on this thread: calls are synchronous, so one buffer per thread serves them
// all, grown as plans need. Taken after the last Python code of a call has run, so that no nested
// call on this thread can move it under the plugin.
struct ThreadWorkspace {
    void* p = nullptr;
    size_t size = 0;
    ~ThreadWorkspace() { std::free(p); }
};
thread_local ThreadWorkspace tl_workspace;

uint64_t thread_workspace(uint64_t size) {
    if (!size) return 0;
    if (tl_workspace.size < size) {
        size_t rounded = (static_cast<size_t>(size) + 63) & ~static_cast<size_t>(63);
        void* p = std::aligned_alloc(64, rounded);
        if (!p) {
            PyErr_NoMemory();
            return 0;
        }
        std::free(tl_workspace.p);
        tl_workspace.p = p;
        tl_workspace.size = rounded;
    }
    return reinterpret_cast<uint64_t>(tl_workspace.p);
}

// Index into plans.LAYOUTS of a 4-D tensor's axis order: axes 0-2 by stride, larger first, ties by
// axis index, the last axis innermost (plans.order_code, the same comparisons).
long order_code(const int64_t* s) {
    int64_t a = s[0], b = s[1], c = s[2];
    if (a >= b) return b >= c ? 0 : a >= c ? 1 : 4;
    return a >= c ? 2 : b >= c ? 3 : 5;
}

// A torch.Size or stride() tuple of 4 exact ints, read without running Python code.
bool read4(PyObject* t, int64_t* out) {
    return PyTuple_Check(t) && PyTuple_GET_SIZE(t) == 4 && read_exact_int_items(PySequence_Fast_ITEMS(t), 4, out);
}

// Python's own errors from a tensor's accessor (a sparse tensor's stride(), ...) mean "not this
// path": cleared, so that the general path meets them and explains. Interrupts and MemoryError pass.
bool passable_error() {
    if (PyErr_ExceptionMatches(PyExc_KeyboardInterrupt) || PyErr_ExceptionMatches(PyExc_MemoryError)) return false;
    PyErr_Clear();
    return true;
}

struct Read {
    int64_t shape[4], stride[4];
    PyObject* dtype = nullptr;  // borrowed after the read: torch's dtypes are singletons its module holds
    uint64_t ptr = 0;
};

// q, k or v: on the CPU (else 0: not served), its shape, strides, dtype and address. -1: an error
// that must propagate.
int read_tensor(PyObject* t, Read& r) {
    PyObject* cpu = PyObject_GetAttr(t, g.str_is_cpu);
    if (!cpu) return passable_error() ? 0 : -1;
    bool on_cpu = cpu == Py_True;
    Py_DECREF(cpu);
    if (!on_cpu) return 0;
    PyObject* v = PyObject_GetAttr(t, g.str_shape);
    if (!v) return passable_error() ? 0 : -1;
    bool ok = read4(v, r.shape);
    Py_DECREF(v);
    if (!ok) return 0;
    v = PyObject_CallMethodNoArgs(t, g.str_stride_fn);
    if (!v) return passable_error() ? 0 : -1;
    ok = read4(v, r.stride);
    Py_DECREF(v);
    if (!ok) return 0;
    v = PyObject_GetAttr(t, g.str_dtype);
    if (!v) return passable_error() ? 0 : -1;
    r.dtype = v;
    Py_DECREF(v);
    v = PyObject_CallMethodNoArgs(t, g.str_data_ptr);
    if (!v) return passable_error() ? 0 : -1;
    r.ptr = PyLong_Check(v) ? PyLong_AsUnsignedLongLong(v) : 0;
    Py_DECREF(v);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        r.ptr = 0;
    }
    return 1;
}

PyObject* not_served() { Py_RETURN_NONE; }

// Whether t asks for gradients (its requires_grad): 1 yes, 0 no or unreadable (the general path
// meets it), -1 an error that must propagate.
int wants_grad(PyObject* t) {
    static PyObject* name = PyUnicode_InternFromString("requires_grad");
    if (!name) return -1;
    PyObject* rg = PyObject_GetAttr(t, name);
    if (!rg) return passable_error() ? 1 : -1;  // unreadable: as if it did, so the general path takes it
    int wants = rg == Py_True;
    Py_DECREF(rg);
    return wants;
}

// An owned reference, dropped at scope exit.
struct Owned {
    PyObject* o = nullptr;
    ~Owned() { Py_XDECREF(o); }
};

// Each expanded axis (stride 0, longer than 1) narrowed to length 1, as hipdnn.torch.masks.unexpanded
// does: its values are equal along that axis, so the engine's broadcast brings them back; then every
// length-1 axis gets stride 1 (a length-1 axis may keep stride 0, which a plan refuses). Strides stay
// as they are when none is 0, so the axis order read from them is the general path's.
void unexpand(Read& r) {
    bool zero = false;
    for (int a = 0; a < 4; ++a) zero = zero || r.stride[a] == 0;
    if (!zero) return;
    for (int a = 0; a < 4; ++a) {
        if (r.stride[a] == 0) r.shape[a] = 1;
        if (r.shape[a] == 1) r.stride[a] = 1;
    }
}

// The memo's bias for this boolean mask and call shape, as a new reference, or null (not held, or the
// mask or the call differ).
PyObject* memo_lookup(SdpaCallsData& c, PyObject* mask, const Read& rm, long long version, PyObject* query_dtype,
                      const int64_t* scores) {
    MaskMemo& m = c.memo;
    if (!m.ref || !m.bias || m.version != version || m.ptr != rm.ptr || m.query_dtype != query_dtype) return nullptr;
    for (int a = 0; a < 4; ++a)
        if (m.shape[a] != rm.shape[a] || m.stride[a] != rm.stride[a] || m.scores[a] != scores[a]) return nullptr;
#if PY_VERSION_HEX >= 0x030D0000
    PyObject* alive = nullptr;
    if (PyWeakref_GetRef(m.ref, &alive) < 0) {
        PyErr_Clear();
        return nullptr;
    }
    Py_XDECREF(alive);  // only its identity is compared
#else
    PyObject* alive = PyWeakref_GetObject(m.ref);
#endif
    if (alive != mask) return nullptr;
    Py_INCREF(m.bias);
    return m.bias;
}

PyObject* memo_dropped(PyObject* self, PyObject* ref);
PyMethodDef memo_dropped_def = {"memo_dropped", memo_dropped, METH_O, nullptr};

void memo_store(PyObject* self, SdpaCallsData& c, PyObject* mask, const Read& rm, long long version,
                PyObject* query_dtype, const int64_t* scores, PyObject* bias) {
    clear_memo(c.memo);
    // the weak reference holds its callback, which holds the table: a cycle only while the memo holds it
    Owned callback{PyCFunction_New(&memo_dropped_def, self)};
    PyObject* ref = callback.o ? PyWeakref_NewRef(mask, callback.o) : nullptr;
    if (!ref) {
        PyErr_Clear();  // a mask without weak references is converted on every call
        return;
    }
    MaskMemo& m = c.memo;
    m.ref = ref;
    Py_INCREF(bias);
    m.bias = bias;
    m.version = version;
    m.ptr = rm.ptr;
    m.query_dtype = query_dtype;
    for (int a = 0; a < 4; ++a) {
        m.shape[a] = rm.shape[a];
        m.stride[a] = rm.stride[a];
        m.scores[a] = scores[a];
    }
}

// The memo's mask died: its bias goes now. The dead weak reference stays until the memo's next store
// or clear (this runs inside the mask's deallocation, while CPython still holds the reference).
PyObject* memo_dropped(PyObject* self, PyObject* ref) {
    MaskMemo& m = reinterpret_cast<SdpaCalls*>(self)->c->memo;
    if (m.ref == ref && m.bias) {
        PyObject* bias = m.bias;
        m.bias = nullptr;
        Py_DECREF(bias);
    }
    Py_RETURN_NONE;
}

// The additive bias of `mask` for a call whose scores are scores[4] and whose query is q (read as rq),
// into rb and *bias (a new reference): 1 found; 0 not served here; -1 an error that must propagate. A
// float mask (q's type or float32) is read in place; a boolean one is converted once by the Python
// side (to_bias) and remembered.
int read_mask(PyObject* self, SdpaCallsData& c, PyObject* mask, PyObject* q, const Read& rq, const int64_t* scores, bool grad_on,
              Read& rb, PyObject** bias) {
    *bias = nullptr;
    if (reinterpret_cast<PyObject*>(Py_TYPE(mask)) != c.tensor_type) return 0;
    Read rm;
    int got = read_tensor(mask, rm);
    if (got <= 0) return got;
    for (int a = 0; a < 4; ++a)
        if (rm.shape[a] != 1 && rm.shape[a] != scores[a]) return 0;  // the general path explains
    if (grad_on && (got = wants_grad(mask)) != 0) return got < 0 ? -1 : 0;  // refused there, with its reason
    if (rm.dtype == rq.dtype || rm.dtype == c.float32) {
        rb = rm;
        unexpand(rb);
        if (rb.shape[3] > 1 && rb.stride[3] != 1) return 0;  // the general path reads a copy
        Py_INCREF(mask);
        *bias = mask;
        return 1;
    }
    if (rm.dtype != c.bool_dtype) return 0;
    static PyObject* version_name = PyUnicode_InternFromString("_version");
    if (!version_name) return -1;
    long long version = -1;
    Owned ver{PyObject_GetAttr(mask, version_name)};  // inference tensors have none: converted every call
    if (!ver.o) {
        if (!passable_error()) return -1;
    } else {
        version = PyLong_Check(ver.o) ? PyLong_AsLongLong(ver.o) : -1;
        if (version < 0 && PyErr_Occurred()) PyErr_Clear();
    }
    PyObject* made = version >= 0 ? memo_lookup(c, mask, rm, version, rq.dtype, scores) : nullptr;
    if (!made) {
        PyObject* args[6] = {mask, q, nullptr, nullptr, nullptr, nullptr};
        for (int a = 0; a < 4; ++a) {
            args[2 + a] = PyLong_FromLongLong(scores[a]);
            if (!args[2 + a]) {
                for (int j = 2; j < 2 + a; ++j) Py_DECREF(args[j]);
                return -1;
            }
        }
        made = PyObject_Vectorcall(c.to_bias, args, 6, nullptr);
        for (int j = 2; j < 6; ++j) Py_DECREF(args[j]);
        if (!made) return passable_error() ? 0 : -1;  // the general path raises it again, in its place
        if (reinterpret_cast<PyObject*>(Py_TYPE(made)) != c.tensor_type) {
            Py_DECREF(made);
            return 0;
        }
        if (version >= 0) memo_store(self, c, mask, rm, version, rq.dtype, scores, made);
    }
    got = read_tensor(made, rb);
    if (got > 0) unexpand(rb);
    if (got <= 0 || rb.dtype != rq.dtype || (rb.shape[3] > 1 && rb.stride[3] != 1)) {
        Py_DECREF(made);
        return got < 0 ? -1 : 0;
    }
    *bias = made;
    return 1;
}

// 1 when a torch function mode or a Python dispatch mode is active on this thread, 0 when none, -1 with
// an exception set. (Two C functions of torch's: no Python code of anyone's runs.)
int python_modes(SdpaCallsData& c) {
    PyObject* on = PyObject_CallNoArgs(c.function_modes);
    if (!on) return -1;
    int active = PyObject_IsTrue(on);
    Py_DECREF(on);
    if (active != 0) return active;
    PyObject* depth = PyObject_CallNoArgs(c.dispatch_depth);
    if (!depth) return -1;
    long n = PyLong_AsLong(depth);
    Py_DECREF(depth);
    if (n == -1 && PyErr_Occurred()) return -1;
    return n != 0;
}

// calls(q, k, v, causal, scale, enable_gqa, bottom_right[, mask]) -> the output, None (the general path
// must serve it: no plan of this kind yet, too long for its capacity, a layout, mask or option this
// path does not read, gradients wanted), or NotImplemented (q is not a plain CPU tensor: another
// device's path).
PyObject* SdpaCalls_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
    SdpaCallsData& c = *reinterpret_cast<SdpaCalls*>(self)->c;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames || nargs < 7 || nargs > 8) {
        PyErr_SetString(PyExc_TypeError, "calls(q, k, v, causal, scale, enable_gqa, bottom_right, mask=None)");
        return nullptr;
    }
    PyObject *q = args[0], *k = args[1], *v = args[2], *scale_arg = args[4];
    PyObject* mask = nargs > 7 && args[7] != Py_None ? args[7] : nullptr;
    PyObject* tensor_type = c.tensor_type;
    // Pointers are read before the output is allocated and used after: no code of the caller's may
    // run in between, or it could free what was read (a mode's handler calling set_() or resize_()).
    // So the flags must be bools, and a call under a torch function or dispatch mode (which sees
    // every accessor and the allocation) is the general path's, which reads after allocating.
    for (int a : {3, 5, 6})
        if (!PyBool_Check(args[a])) return not_served();
    int modes = python_modes(c);
    if (modes != 0) return modes < 0 ? nullptr : not_served();
    if (reinterpret_cast<PyObject*>(Py_TYPE(q)) != tensor_type) Py_RETURN_NOTIMPLEMENTED;
    Read rq, rk, rv;
    int got = read_tensor(q, rq);
    if (got < 0) return nullptr;
    if (got == 0) Py_RETURN_NOTIMPLEMENTED;
    if (reinterpret_cast<PyObject*>(Py_TYPE(k)) != tensor_type ||
        reinterpret_cast<PyObject*>(Py_TYPE(v)) != tensor_type)
        return not_served();
    if ((got = read_tensor(k, rk)) <= 0) return got < 0 ? nullptr : not_served();
    if ((got = read_tensor(v, rv)) <= 0) return got < 0 ? nullptr : not_served();
    if (rk.dtype != rq.dtype || rv.dtype != rq.dtype) return not_served();
    // gradients wanted: the autograd path records the call
    PyObject* grad = PyObject_CallNoArgs(c.grad_enabled);
    if (!grad) return nullptr;
    bool grad_on = grad == Py_True;
    Py_DECREF(grad);
    if (grad_on) {
        for (PyObject* t : {q, k, v})
            if ((got = wants_grad(t)) != 0) return got < 0 ? nullptr : not_served();
    }
    int64_t b = rq.shape[0], hq = rq.shape[1], sq = rq.shape[2], d = rq.shape[3];
    int64_t hk = rv.shape[1], skv = rv.shape[2], dv = rv.shape[3];
    if (rk.shape[0] != b || rv.shape[0] != b || rk.shape[1] != hk || rk.shape[2] != skv || rk.shape[3] != d)
        return not_served();
    const bool gqa = args[5] == Py_True;
    if (!(hq == hk || (gqa && hk > 0 && hq % hk == 0))) return not_served();
    if (b <= 0 || hq <= 0 || sq <= 0 || skv <= 0 || d <= 0 || dv <= 0) return not_served();
    const Read* reads[3] = {&rq, &rk, &rv};
    for (const Read* r : reads)
        for (int a = 0; a < 4; ++a)
            if (r->stride[a] <= 0 || (a == 3 && r->stride[a] != 1)) return not_served();
    double scale;
    if (scale_arg == Py_None) {
        scale = 1.0 / std::sqrt(static_cast<double>(d));  // Python's 1.0 / math.sqrt(d), bit for bit
    } else if (PyFloat_CheckExact(scale_arg)) {
        scale = PyFloat_AS_DOUBLE(scale_arg);
    } else if (PyLong_CheckExact(scale_arg)) {
        scale = PyLong_AsDouble(scale_arg);
        if (scale == -1.0 && PyErr_Occurred()) return passable_error() ? not_served() : nullptr;
    } else {
        return not_served();
    }
    const bool causal = args[3] == Py_True;
    const bool aligned = causal && args[6] == Py_True;
    SdpaEntry want;  // the call's kind (no references held: compared, never stored)
    want.dtype = rq.dtype;
    want.heads = hq;
    want.kv_heads = hk;
    want.head_dim = d;
    want.value_dim = dv;
    want.scale = scale;
    want.causal = causal;
    want.bottom_right = aligned;  // the alignment matters only with the causal mask
    long code_q = order_code(rq.stride);
    want.codes = code_q + 6 * order_code(rk.stride) + 36 * order_code(rv.stride);
    // A kind like this one, with a bias slot when the call has a mask, whose capacity holds the call:
    // the mask is read (a boolean one converted) only then. Without a mask it is the call's plan.
    const SdpaEntry* found = nullptr;
    for (const SdpaEntry& e : c.entries) {
        if (e.same_core(want) && (e.bias_dtype != nullptr) == (mask != nullptr) && e.holds(b, sq, skv)) {
            found = &e;
            break;
        }
    }
    if (!found) return not_served();
    Read rb;
    Owned bias;
    if (mask) {
        const int64_t scores[4] = {b, hq, sq, skv};
        got = read_mask(self, c, mask, q, rq, scores, grad_on, rb, &bias.o);
        if (got <= 0) return got < 0 ? nullptr : not_served();
        want.bias_dtype = rb.dtype;
        want.bias_batched = rb.shape[0] > 1;
        want.bias_per_head = rb.shape[1] > 1;
        want.bias_code = order_code(rb.stride);
        found = nullptr;  // (looked up again: the conversion ran Python code, which may change the table)
        for (const SdpaEntry& e : c.entries) {
            if (e.same_kind(want)) {
                found = &e;
                break;
            }
        }
        if (!found || !found->holds(b, sq, skv)) return not_served();
    }
    // Held for the call: torch's allocator below may run Python code that replaces the entry.
    Owned binding{found->binding};
    Py_INCREF(binding.o);
    PyObject* size = Py_BuildValue("(LLLL)", static_cast<long long>(b), static_cast<long long>(hq),
                                   static_cast<long long>(sq), static_cast<long long>(dv));
    if (!size) return nullptr;
    PyObject* call_args[4] = {size, PyTuple_GET_ITEM(c.layouts, code_q), rq.dtype, c.device};
    PyObject* o = PyObject_Vectorcall(c.empty_permuted, call_args, 2, c.kwnames);
    Py_DECREF(size);
    if (!o) return nullptr;
    // The output read as any tensor is, its shape included: what the allocator gave (torch's, or what a
    // mode put in its place) is what the core checks against the plan, never what was asked for.
    Read ro;
    got = reinterpret_cast<PyObject*>(Py_TYPE(o)) == tensor_type ? read_tensor(o, ro) : 0;
    if (got <= 0 || ro.dtype != rq.dtype) {
        Py_DECREF(o);
        return got < 0 ? nullptr : not_served();
    }
    uint64_t ws = thread_workspace(bound_workspace_size(binding.o));  // no Python code runs after this
    if (PyErr_Occurred()) {
        Py_DECREF(o);
        return nullptr;
    }
    const Read* slots[5] = {&rq, &rk, &rv, &rb, &ro};
    size_t n = 0;
    uint64_t ptrs[5];
    const int64_t* shapes[5];
    const int64_t* strides[5];
    size_t ranks[5] = {4, 4, 4, 4, 4};
    for (const Read* r : slots) {
        if (r == &rb && !mask) continue;
        ptrs[n] = r->ptr;
        shapes[n] = r->shape;
        strides[n] = r->stride;
        ++n;
    }
    PyObject* ran = call_bound_read(binding.o, n, ptrs, shapes, strides, ranks, ws);
    if (ran != Py_True) {
        Py_DECREF(o);
        if (!ran) return nullptr;
        Py_DECREF(ran);
        return not_served();  // a view wider than the plan's maximum: the general path grows the kind
    }
    Py_DECREF(ran);
    ++c.hits;
    return o;
}

bool read_i64(PyObject* o, int64_t* out, const char* what) {
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "SdpaCalls.put: %s must be an int", what);
        return false;
    }
    *out = PyLong_AsLongLong(o);
    return !(*out == -1 && PyErr_Occurred());
}

// put(binding, dtype, heads, kv_heads, head_dim, value_dim, scale, causal, bottom_right, codes, cap_b,
// cap_sq, cap_skv[, bias_dtype, bias_batched, bias_per_head, bias_code]): serve calls of this kind with
// this bound call (replacing the kind's earlier one). A kind with an additive bias names its slot's
// element type, whether it has a batch and a head axis, and its axis order (plans.order_code).
PyObject* SdpaCalls_put(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    SdpaCallsData& c = *reinterpret_cast<SdpaCalls*>(self)->c;
    if (nargs != 13 && nargs != 17) {
        PyErr_SetString(PyExc_TypeError,
                        "put(binding, dtype, heads, kv_heads, head_dim, value_dim, scale, causal, bottom_right, "
                        "codes, cap_b, cap_sq, cap_skv[, bias_dtype, bias_batched, bias_per_head, bias_code])");
        return nullptr;
    }
    if (!is_binding(args[0])) {
        PyErr_SetString(PyExc_TypeError, "SdpaCalls.put: binding must be a bound call (Graph.bind)");
        return nullptr;
    }
    SdpaEntry e;
    const char* names[] = {"heads", "kv_heads", "head_dim", "value_dim"};
    int64_t* dims[] = {&e.heads, &e.kv_heads, &e.head_dim, &e.value_dim};
    for (int i = 0; i < 4; ++i)
        if (!read_i64(args[2 + i], dims[i], names[i])) return nullptr;
    e.scale = PyFloat_AsDouble(args[6]);
    if (e.scale == -1.0 && PyErr_Occurred()) return nullptr;
    int causal = PyObject_IsTrue(args[7]);
    int aligned = PyObject_IsTrue(args[8]);
    if (causal < 0 || aligned < 0) return nullptr;
    e.causal = causal > 0;
    e.bottom_right = e.causal && aligned > 0;
    int64_t codes = 0, bias_code = 0;
    if (!read_i64(args[9], &codes, "codes")) return nullptr;
    if (codes < 0 || codes >= 216) {
        PyErr_SetString(PyExc_ValueError, "SdpaCalls.put: codes must be in [0, 216)");
        return nullptr;
    }
    e.codes = static_cast<long>(codes);
    if (!read_i64(args[10], &e.cap_b, "cap_b") || !read_i64(args[11], &e.cap_sq, "cap_sq") ||
        !read_i64(args[12], &e.cap_skv, "cap_skv"))
        return nullptr;
    if (nargs == 17 && args[13] != Py_None) {
        int batched = PyObject_IsTrue(args[14]);
        int per_head = PyObject_IsTrue(args[15]);
        if (batched < 0 || per_head < 0 || !read_i64(args[16], &bias_code, "bias_code")) return nullptr;
        if (bias_code < 0 || bias_code >= 6) {
            PyErr_SetString(PyExc_ValueError, "SdpaCalls.put: bias_code must be in [0, 6)");
            return nullptr;
        }
        e.bias_dtype = args[13];
        e.bias_batched = batched > 0;
        e.bias_per_head = per_head > 0;
        e.bias_code = static_cast<long>(bias_code);
    }
    e.binding = args[0];
    e.dtype = args[1];
    Py_INCREF(e.binding);
    Py_INCREF(e.dtype);
    Py_XINCREF(e.bias_dtype);
    for (SdpaEntry& x : c.entries) {
        if (x.same_kind(e)) {
            SdpaEntry old = x;
            x = e;
            drop_entry(old);  // after the swap: a drop may run Python code
            Py_RETURN_NONE;
        }
    }
    c.entries.push_back(e);
    Py_RETURN_NONE;
}

PyObject* SdpaCalls_clear(PyObject* self, PyObject*) {
    SdpaCallsData& c = *reinterpret_cast<SdpaCalls*>(self)->c;
    clear_entries(c.entries);
    clear_memo(c.memo);
    Py_RETURN_NONE;
}

PyObject* SdpaCalls_get_hits(PyObject* self, void*) {
    return PyLong_FromLongLong(reinterpret_cast<SdpaCalls*>(self)->c->hits);
}

int SdpaCalls_set_hits(PyObject* self, PyObject* value, void*) {
    long long v = value ? PyLong_AsLongLong(value) : -1;
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < 0) {
        PyErr_SetString(PyExc_ValueError, "hits is a count (>= 0)");
        return -1;
    }
    reinterpret_cast<SdpaCalls*>(self)->c->hits = v;
    return 0;
}

Py_ssize_t SdpaCalls_len(PyObject* self) {
    return static_cast<Py_ssize_t>(reinterpret_cast<SdpaCalls*>(self)->c->entries.size());
}

// SdpaCalls(tensor_type, empty_permuted, is_grad_enabled, cpu_device, layouts, to_bias, bool_dtype, float32,
//           function_modes, dispatch_depth)
PyObject* SdpaCalls_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
    PyObject *tensor_type, *empty_permuted, *grad_enabled, *device, *layouts, *to_bias, *bool_dtype, *float32;
    PyObject *function_modes, *dispatch_depth;
    static const char* kw[] = {"tensor_type", "empty_permuted", "is_grad_enabled", "cpu_device",
                               "layouts",     "to_bias",        "bool_dtype",      "float32",
                               "function_modes", "dispatch_depth", nullptr};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!OOOO!OOOOO", const_cast<char**>(kw), &PyType_Type,
                                     &tensor_type, &empty_permuted, &grad_enabled, &device, &PyTuple_Type, &layouts,
                                     &to_bias, &bool_dtype, &float32, &function_modes, &dispatch_depth))
        return nullptr;
    if (PyTuple_GET_SIZE(layouts) != 6) {
        PyErr_SetString(PyExc_ValueError, "SdpaCalls: layouts must hold the 6 axis orders");
        return nullptr;
    }
    PyObject* kwnames = Py_BuildValue("(ss)", "dtype", "device");
    if (!kwnames) return nullptr;
    SdpaCalls* self = reinterpret_cast<SdpaCalls*>(type->tp_alloc(type, 0));
    if (!self) {
        Py_DECREF(kwnames);
        return nullptr;
    }
    auto* c = new SdpaCallsData();
    PyObject* held[] = {tensor_type, empty_permuted, grad_enabled, device,         layouts,
                        to_bias,     bool_dtype,     float32,      function_modes, dispatch_depth};
    for (PyObject* o : held) Py_INCREF(o);
    c->function_modes = function_modes;
    c->dispatch_depth = dispatch_depth;
    c->tensor_type = tensor_type;
    c->empty_permuted = empty_permuted;
    c->grad_enabled = grad_enabled;
    c->device = device;
    c->layouts = layouts;
    c->to_bias = to_bias;
    c->bool_dtype = bool_dtype;
    c->float32 = float32;
    c->kwnames = kwnames;
    self->c = c;
    self->vectorcall = SdpaCalls_call;
    return reinterpret_cast<PyObject*>(self);
}

void SdpaCalls_dealloc(PyObject* self) {
    SdpaCallsData* c = reinterpret_cast<SdpaCalls*>(self)->c;
    if (c) {
        clear_entries(c->entries);
        clear_memo(c->memo);  // (empty: a held memo keeps the table alive through its callback)
        for (PyObject* o : {c->tensor_type, c->empty_permuted, c->grad_enabled, c->device, c->layouts, c->to_bias,
                            c->bool_dtype, c->float32, c->function_modes, c->dispatch_depth, c->kwnames})
            Py_XDECREF(o);
        delete c;
    }
    Py_TYPE(self)->tp_free(self);
}

PyMethodDef SdpaCalls_methods[] = {
    {"put", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(SdpaCalls_put)), METH_FASTCALL,
     "put(binding, dtype, heads, kv_heads, head_dim, value_dim, scale, causal, bottom_right, codes, cap_b, "
     "cap_sq, cap_skv[, bias_dtype, bias_batched, bias_per_head, bias_code]): serve this kind's calls with this "
     "bound call"},
    {"clear", SdpaCalls_clear, METH_NOARGS, "Drop every kind and the remembered mask."},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef SdpaCalls_getset[] = {
    {"hits", SdpaCalls_get_hits, SdpaCalls_set_hits, "calls served", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PySequenceMethods SdpaCalls_sequence = {};

}  // namespace

PyTypeObject SdpaCallsType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// thread_workspace(size) -> int: this thread's workspace of at least `size` bytes (0 for 0), 64-byte
// aligned, valid until a larger one is asked for on this thread.
PyObject* mod_thread_workspace(PyObject*, PyObject* arg) {
    unsigned long long size = PyLong_AsUnsignedLongLong(arg);
    if (size == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return nullptr;
    uint64_t p = thread_workspace(size);
    if (PyErr_Occurred()) return nullptr;
    return PyLong_FromUnsignedLongLong(p);
}

bool ready_sdpa_calls_type() {
    SdpaCalls_sequence.sq_length = SdpaCalls_len;
    SdpaCallsType.tp_call = PyVectorcall_Call;
    SdpaCallsType.tp_vectorcall_offset = offsetof(SdpaCalls, vectorcall);
    SdpaCallsType.tp_name = "hipdnn.backend._execute_core.SdpaCalls";
    SdpaCallsType.tp_basicsize = sizeof(SdpaCalls);
    SdpaCallsType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
    SdpaCallsType.tp_new = SdpaCalls_new;
    SdpaCallsType.tp_dealloc = SdpaCalls_dealloc;
    SdpaCallsType.tp_methods = SdpaCalls_methods;
    SdpaCallsType.tp_getset = SdpaCalls_getset;
    SdpaCallsType.tp_as_sequence = &SdpaCalls_sequence;
    return PyType_Ready(&SdpaCallsType) == 0;
}

}  // namespace hipdnn_core
