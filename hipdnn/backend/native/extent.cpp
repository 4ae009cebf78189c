// Extent and overlap proofs: how many elements and bytes a layout addresses, whether a buffer can
// back a tensor, and whether the memory of written tensors meets any other.
#include "core.h"

#include <cstdio>

namespace hipdnn_core {

// Elements addressed from the base pointer: sum((d - 1) * s) + 1, without overflow. Dims >= 1 and
// strides >= 1 are checked before. False when the sum leaves int64.
bool addressed_elements(const int64_t* dims, const int64_t* strides, size_t rank, int64_t* out) {
    int64_t total = 1;
    for (size_t i = 0; i < rank; ++i) {
        int64_t span = 0;
        if (__builtin_mul_overflow(dims[i] - 1, strides[i], &span)) return false;
        if (__builtin_add_overflow(total, span, &total)) return false;
    }
    *out = total;
    return true;
}

// Whether two distinct indices of a strided layout can address the same element. `outer_first` lists
// the axes by non-increasing stride. A layout passes when every axis of size > 1 steps over all that
// the axes inside it span: stride >= 1 + sum over inner axes of stride * (dim - 1). That is exact for
// nested layouts (row-major, permuted, padded) and conservative for interleaved ones: it refuses
// dims [3, 2] with strides [2, 3], whose six offsets happen to be distinct. O(rank).
bool layout_overlaps(const int64_t* dims, const int64_t* strides, const int* outer_first, size_t rank) {
    int64_t span = 1;  // one past the furthest element the inner axes reach
    for (size_t k = rank; k-- > 0;) {
        size_t a = static_cast<size_t>(outer_first[k]);
        if (dims[a] <= 1) continue;
        if (strides[a] < span) return true;
        int64_t step = 0;
        if (__builtin_mul_overflow(strides[a], dims[a] - 1, &step) || __builtin_add_overflow(span, step, &span))
            span = INT64_MAX;  // beyond any memory: every further axis of size > 1 overlaps
    }
    return false;
}

// The same for strides in any order: sorted first, O(rank log rank).
bool layout_overlaps(const int64_t* dims, const int64_t* strides, size_t rank) {
    std::vector<int> order(rank);
    for (size_t a = 0; a < rank; ++a) order[a] = static_cast<int>(a);
    std::stable_sort(order.begin(), order.end(), [strides](int x, int y) {
        return strides[static_cast<size_t>(x)] > strides[static_cast<size_t>(y)];
    });
    return layout_overlaps(dims, strides, order.data(), rank);
}
// Bytes a tensor of data type `dt` addresses from its pointer at dims/strides (dims and strides >= 1);
// false when that leaves int64. An unknown element size counts as `fallback_itemsize`.
bool addressed_bytes(int dt, const int64_t* dims, const int64_t* strides, size_t rank, int fallback_itemsize,
                     int64_t* out) {
    int itemsize = itemsize_of(dt);
    if (!itemsize) itemsize = fallback_itemsize > 0 ? fallback_itemsize : 1;
    int64_t elems = 0;
    return addressed_elements(dims, strides, rank, &elems) && !__builtin_mul_overflow(elems, int64_t{itemsize}, out);
}

// Can `b` back a tensor of data type `dt` at dims/strides? (dtype exact, layout, extent). `extent`,
// when given, receives the bytes the tensor addresses from the pointer (of a checked buffer).
namespace {

// How a user passes a view of the call's shape from a larger array: "x[:, :, :8]".
std::string view_hint(const std::vector<int64_t>& have, const int64_t* want, size_t rank) {
    if (have.size() != rank) return "";
    std::string s = "x[";
    for (size_t i = 0; i < rank; ++i) {
        if (have[i] < want[i]) return "";
        if (i) s += ", ";
        s += have[i] == want[i] ? ":" : ":" + std::to_string(want[i]);
    }
    while (s.size() > 3 && s.compare(s.size() - 3, 3, ", :") == 0) s.resize(s.size() - 3);  // x[:, :8, :] -> x[:, :8]
    return s + "]";
}

}  // namespace

// A value that states its own shape and strides (numpy, torch, DLPack, array interfaces) must state
// the ones the call gives the tensor, with or without overrides: a larger array is never read as a
// compact block at its start. Then its pointer must be aligned to its elements and every byte the
// tensor addresses must lie in it. Bare pointers (unsized) are trusted.
bool check_buffer(const Buf& b, const std::string& where, int dt, const int64_t* dims, const int64_t* strides,
                  size_t rank, bool overridden, int64_t* extent) {
    if (!b.sized) return true;
    if (b.dtype_code == -2) {
        int want = itemsize_of(dt);
        if (want && b.itemsize != want) {
            raise(kInvalidValue, where + ": buffer item size " + std::to_string(b.itemsize) + " disagrees with " +
                                     dtype_name(dt));
            return false;
        }
    } else if (b.dtype_code != dt) {
        raise(kInvalidValue, where + ": buffer dtype " + b.dtype_name + " disagrees with " + dtype_name(dt));
        return false;
    }
    const char* whose = overridden ? "the call's (overridden) " : "the tensor's ";
    bool same_shape = b.shape.size() == rank && std::equal(b.shape.begin(), b.shape.end(), dims);
    if (!same_shape) {
        std::string hint = view_hint(b.shape, dims, rank);
        raise(kInvalidValue, where + ": buffer shape " + list_str(b.shape) + " disagrees with " + whose + "dims " +
                                 list_str(dims, rank) +
                                 (hint.empty() ? std::string()
                                               : "; pass a view of that shape (" + hint +
                                                     ") with its strides as the override's stride"));
        return false;
    }
    if (!b.strides_known) {
        raise(kInvalidValue, where + ": buffer strides are not whole elements");
        return false;
    }
    for (size_t i = 0; i < rank; ++i) {
        if (dims[i] > 1 && b.strides[i] != strides[i]) {
            std::string fix = overridden ? "; give the override stride=" + list_str(b.strides) +
                                               " to read it as it is laid out"
                                         : std::string();
            raise(kInvalidValue, where + ": buffer strides " + list_str(b.strides) + " disagree with " + whose +
                                     "strides " + list_str(strides, rank) + fix);
            return false;
        }
    }
    int align = itemsize_of(dt) ? itemsize_of(dt) : b.itemsize;
    if (align > 1 && b.ptr % static_cast<uint64_t>(align) != 0) {
        char p[32];
        std::snprintf(p, sizeof p, "0x%llx", static_cast<unsigned long long>(b.ptr));
        raise(kInvalidValue, where + ": buffer pointer " + p + " is not aligned to its " + std::to_string(align) +
                                 "-byte elements (" + dtype_name(dt) + "); engines load whole elements");
        return false;
    }
    int64_t need = 0;
    if (!addressed_bytes(dt, dims, strides, rank, b.itemsize, &need)) {
        raise(kInvalidValue, where + ": dims " + list_str(dims, rank) + " with strides " + list_str(strides, rank) +
                                 " address more bytes than int64 can count");
        return false;
    }
    uint64_t end = 0;
    if (b.ptr < b.low || __builtin_add_overflow(b.ptr, static_cast<uint64_t>(need), &end) || end > b.high) {
        raise(kInvalidValue, where + ": addresses " + std::to_string(need) + " bytes at dims " +
                                 list_str(dims, rank) + " strides " + list_str(strides, rank) +
                                 ", but the buffer holds " + std::to_string(b.high > b.ptr ? b.high - b.ptr : 0) +
                                 " bytes from its pointer");
        return false;
    }
    if (extent) *extent = need;
    return true;
}

// -- aliasing -----------------------------------------------------------------------------------
// The memory one tensor (or the workspace) takes in a call: [lo, hi) from its pointer to the last
// byte its shape and strides address. Outputs of nodes (and the workspace) are written, so no byte
// of theirs may be addressed by any other tensor; inputs may share memory (x + x, matmul(a, a)).
// Spans that meet are only a hint: tensors interleaved in one buffer (dQ, dK, dV packed as
// [B, S, 3, H, D]) have meeting spans and disjoint elements. Whether they share a byte is decided
// by layouts_meet.
bool span_at(uint64_t ptr, int64_t bytes, int tensor, bool written, const int64_t* dims, const int64_t* strides,
             uint32_t rank, int itemsize, Span* out) {
    if (bytes < 0 || __builtin_add_overflow(ptr, static_cast<uint64_t>(bytes), &out->hi)) return false;
    out->lo = ptr;
    out->tensor = tensor;
    out->written = written;
    out->dims = dims;
    out->strides = strides;
    out->rank = rank;
    out->itemsize = itemsize > 0 ? itemsize : 1;
    return true;
}

void add_span(std::vector<Span>& spans, size_t* written, const Span& sp) {
    spans.push_back(sp);
    if (sp.written) ++*written;
}

bool meet(const Span& a, const Span& b) { return a.lo < b.hi && b.lo < a.hi; }

namespace {

using i128 = __int128;

i128 floor_div(i128 a, i128 b) {  // b > 0
    i128 q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}
i128 ceil_div(i128 a, i128 b) { return -floor_div(-a, b); }

// One term c * z of the search, z in [lo, hi].
struct Term {
    i128 c, lo, hi;
};

// Nodes one pair's search may visit before it answers "they may meet": a refusal, never a miss.
constexpr long kSearchBudget = 1 << 14;

// Is there z with lo_k <= z_k <= hi_k and L <= sum(c_k z_k) <= H? Terms sorted by c, largest first;
// rmin/rmax[k] bound what the terms from k on can add. Each level keeps only the z that leave the
// target reachable, so nested layouts try one or two values per axis.
bool reachable(const Term* t, const i128* rmin, const i128* rmax, size_t n, size_t k, i128 p, i128 L, i128 H,
               long* budget) {
    if (k == n) return L <= p && p <= H;
    i128 zlo = ceil_div(L - p - rmax[k + 1], t[k].c);
    i128 zhi = floor_div(H - p - rmin[k + 1], t[k].c);
    if (zlo < t[k].lo) zlo = t[k].lo;
    if (zhi > t[k].hi) zhi = t[k].hi;
    for (i128 z = zlo; z <= zhi; ++z) {
        if (--*budget < 0) return true;
        if (reachable(t, rmin, rmax, n, k + 1, p + t[k].c * z, L, H, budget)) return true;
    }
    return false;
}

}  // namespace

// Element x of A starts at a.lo + sum(x_k * sA_k * ea) and covers ea bytes; element y of B likewise.
// They share a byte when -ea < startA - startB < eb, that is when
//   sum(x_k * sA_k * ea) - sum(y_k * sB_k * eb)  lies in  [b.lo - a.lo - ea + 1, b.lo - a.lo + eb - 1],
// a bounded integer search over the axes of both (terms of equal weight merged: the same layout at
// two offsets becomes one term per axis over [-(n-1), n-1]). Sums stay far inside 128 bits: every
// span fits in the address space.
bool layouts_meet(const Span& a, const Span& b) {
    if (!meet(a, b)) return false;
    SmallVec<Term, 40> terms(2 * (static_cast<size_t>(a.rank) + static_cast<size_t>(b.rank)) + 2);
    size_t n = 0;
    auto add = [&](i128 c, i128 lo, i128 hi) {
        if (c == 0 || (lo == 0 && hi == 0)) return;
        if (c < 0) {
            c = -c;
            i128 l = -hi;
            hi = -lo;
            lo = l;
        }
        for (size_t k = 0; k < n; ++k) {
            if (terms[k].c == c) {
                terms[k].lo += lo;
                terms[k].hi += hi;
                return;
            }
        }
        terms[n++] = Term{c, lo, hi};
    };
    auto add_layout = [&](const Span& s, int sign) {
        if (s.rank == 0) {
            add(sign, 0, static_cast<i128>(s.hi - s.lo) - 1);
            return;
        }
        for (uint32_t k = 0; k < s.rank; ++k)
            add(static_cast<i128>(sign) * s.strides[k] * s.itemsize, 0, static_cast<i128>(s.dims[k]) - 1);
    };
    int ea = a.rank == 0 ? 1 : a.itemsize, eb = b.rank == 0 ? 1 : b.itemsize;
    add_layout(a, 1);
    add_layout(b, -1);
    std::sort(terms.data(), terms.data() + n, [](const Term& x, const Term& y) { return x.c > y.c; });
    SmallVec<i128, 41> rmin(n + 1), rmax(n + 1);
    rmin[n] = rmax[n] = 0;
    for (size_t k = n; k-- > 0;) {
        rmin[k] = rmin[k + 1] + terms[k].c * terms[k].lo;
        rmax[k] = rmax[k + 1] + terms[k].c * terms[k].hi;
    }
    i128 delta = static_cast<i128>(b.lo) - static_cast<i128>(a.lo);
    i128 L = delta - ea + 1, H = delta + eb - 1;
    if (L > rmax[0] || H < rmin[0]) return false;
    long budget = kSearchBudget;
    return reachable(terms.data(), rmin.data(), rmax.data(), n, 0, 0, L, H, &budget);
}

// Written spans against every other. Few spans: each pair; more: sorted by start, each span against
// the later ones that start before it ends (so the exact test runs only where spans meet).
bool find_alias(Span* spans, size_t n, size_t written, Span* first, Span* second) {
    if (written == 0 || n < 2) return false;
    auto found = [&](const Span& x, const Span& y) {
        *first = x.written ? x : y;
        *second = x.written ? y : x;
        return true;
    };
    if (written * n <= 64) {
        for (size_t i = 0; i < n; ++i) {
            if (!spans[i].written) continue;
            for (size_t j = 0; j < n; ++j) {
                if (j == i || (spans[j].written && j < i)) continue;  // a written pair is tested once
                if (layouts_meet(spans[i], spans[j])) return found(spans[i], spans[j]);
            }
        }
        return false;
    }
    std::sort(spans, spans + n, [](const Span& a, const Span& b) { return a.lo < b.lo; });
    for (size_t i = 0; i < n; ++i) {
        for (size_t j = i + 1; j < n && spans[j].lo < spans[i].hi; ++j) {
            if ((spans[i].written || spans[j].written) && layouts_meet(spans[i], spans[j]))
                return found(spans[i], spans[j]);
        }
    }
    return false;
}

std::string span_label(const PlanData& d, const Span& sp) {
    std::string who = sp.tensor < 0 ? std::string("the workspace") : d.tensors[static_cast<size_t>(sp.tensor)].label;
    char range[64];
    std::snprintf(range, sizeof range, " [0x%llx, 0x%llx)", static_cast<unsigned long long>(sp.lo),
                  static_cast<unsigned long long>(sp.hi));
    return who + range;
}

// The bound call's check for a few tensors: each written slot against every other slot, and the
// workspace against all, straight from the pointer array (no spans stored, no sort). Raises and
// returns false on the first overlap.
bool check_alias_few(const PlanData& d, const hipdnnPluginDeviceBuffer_t* buffers, const int64_t* bytes,
                     const int* tensor, const uint8_t* written, const int64_t* const* dims,
                     const int64_t* const* strides, const uint32_t* ranks, const int* itemsizes,
                     const size_t* written_slots, size_t n_written, size_t n, uint64_t ws, uint64_t ws_size) {
    auto slot = [&](size_t j, Span* out) {
        return span_at(reinterpret_cast<uint64_t>(buffers[j].ptr), bytes[j], tensor[j], written[j] != 0, dims[j],
                       strides[j], ranks[j], itemsizes[j], out);
    };
    // one written span against every slot but `skip` (and, among written slots, only later ones)
    auto against = [&](const Span& w, size_t skip, Span* other) {
        for (size_t j = 0; j < n; ++j) {
            if (j == skip || (skip < n && written[j] && j < skip)) continue;
            uint64_t lo2 = reinterpret_cast<uint64_t>(buffers[j].ptr);
            if (lo2 >= w.hi) continue;
            if (slot(j, other) && layouts_meet(w, *other)) return true;
        }
        return false;
    };
    Span a, b;
    for (size_t k = 0; k < n_written; ++k) {
        size_t w = written_slots[k];
        if (slot(w, &a) && against(a, w, &b)) return raise_alias(d, a, b), false;
    }
    if (ws && ws_size &&
        span_at(ws, static_cast<int64_t>(std::min<uint64_t>(ws_size, INT64_MAX)), -1, true, nullptr, nullptr, 0, 1,
                &a) &&
        against(a, n, &b))
        return raise_alias(d, a, b), false;
    return true;
}

std::nullptr_t raise_alias(const PlanData& d, const Span& written, const Span& other) {
    std::string what = written.tensor < 0 ? "the workspace is written by the engine"
                                          : "a node writes " + d.tensors[static_cast<size_t>(written.tensor)].label;
    return raise(kInvalidVariantPack, span_label(d, written) + " overlaps " + span_label(d, other) + " in memory: " +
                                          what + ", so it must not share memory with any other tensor (in-place "
                                          "execution is not supported)");
}

}  // namespace hipdnn_core
