// Which instruction set the CPU engine's kernels run: CPUID once per process, an environment
// override read at every plan build (see cpu_kernels.hpp, isa_best and isa_for_plan).

#include "cpu_kernels.hpp"

#include <cctype>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace hipdnn_cpu
{

const char* isa_name(Isa isa)
{
    switch(isa)
    {
    case Isa::Avx2:
        return "avx2";
    case Isa::Avx512:
        return "avx512";
    case Isa::Avx512Bf16:
        return "avx512_bf16";
    case Isa::Amx:
        return "amx";
    case Isa::Baseline:
    default:
        return "baseline";
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
namespace
{
// CPUID.1:ECX.F16C (not every compiler's __builtin_cpu_supports knows "f16c").
bool has_f16c()
{
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}

// AMX-TILE and AMX-BF16 (CPUID.7.0:EDX bits 24 and 22), AVX512_BF16 (CPUID.7.1:EAX bit 5), and the
// kernel's permission to use the tile data state: Linux hands it out per process on request
// (ARCH_REQ_XCOMP_PERM), and refuses it where the OS does not manage the state or a thread's
// signal stack is too small for it. Asked once; every thread of the process may then use tiles.
bool has_amx_bf16()
{
#if defined(HIPDNN_CPU_HAVE_AMX) && defined(__linux__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if(__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0 || (d & (1u << 24)) == 0 || (d & (1u << 22)) == 0)
        return false;
    if(__get_cpuid_count(7, 1, &a, &b, &c, &d) == 0 || (a & (1u << 5)) == 0)
        return false;
    constexpr long kArchReqXcompPerm = 0x1023; // <asm/prctl.h>
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
    return false; // not compiled in (no compiler support for AMX), or not Linux
#endif
}

// AVX512_BF16 (CPUID.7.1:EAX bit 5: VDPBF16PS and the bf16 conversions), where the build has its kernels.
bool has_avx512_bf16()
{
#if defined(HIPDNN_CPU_HAVE_AVX512BF16)
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) != 0 && (a & (1u << 5)) != 0;
#else
    return false; // not compiled in (no compiler support for -mavx512bf16)
#endif
}
// An AMD CPU (CPUID.0 vendor "AuthenticAMD").
bool is_amd()
{
    unsigned a = 0, b = 0, c = 0, d = 0;
    // (the vendor string is EBX, EDX, ECX: "Auth", "enti", "cAMD")
    return __get_cpuid(0, &a, &b, &c, &d) != 0 && b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;
}
// CPUID.1's display family (base family, plus the extended family where the base is Fh).
unsigned cpu_family()
{
    unsigned a = 0, b = 0, c = 0, d = 0;
    if(__get_cpuid(1, &a, &b, &c, &d) == 0)
        return 0;
    const unsigned base = (a >> 8) & 0xFu;
    return base == 0xFu ? base + ((a >> 20) & 0xFFu) : base;
}
} // namespace
#endif

namespace
{
// What this CPU (and its OS) can run, read once per process, and the build a plan runs by default
// (the baseline elsewhere than x86-64 under GCC / Clang).
struct IsaSupport
{
    Isa widest = Isa::Baseline; // every build up to this one runs here
    Isa preferred = Isa::Baseline;
    bool amd = false; // CPUID vendor AuthenticAMD
    bool two_fma512 = false; // two 512-bit FMAs a cycle (cpu_two_fma512)
};

IsaSupport read_support()
{
    IsaSupport r;
#if defined(__x86_64__) && defined(__GNUC__)
    r.amd = is_amd();
    // __builtin_cpu_supports also checks that the OS saves the ymm / zmm state (XGETBV), which F16C
    // needs as AVX2 does.
    __builtin_cpu_init();
    if(!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !has_f16c())
        return r;
    r.widest = r.preferred = Isa::Avx2;
    if(!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vl")
       || !__builtin_cpu_supports("avx512bw"))
        return r;
    r.widest = r.preferred = Isa::Avx512;
    // Intel's AVX-512 cores issue two 512-bit FMAs a cycle, as AMD's do from Zen 5 (family 1Ah); Zen 4
    // (19h) runs each on its two 256-bit pipes, one a cycle.
    r.two_fma512 = !r.amd || cpu_family() >= 0x1A;
    // (the AMX check requires AVX512_BF16 too: an AMX CPU runs every build)
    if(has_amx_bf16())
        r.widest = r.preferred = Isa::Amx;
    else if(has_avx512_bf16())
    {
        r.widest = Isa::Avx512Bf16;
        // The AVX512_BF16 build pays only where VDPBF16PS runs at twice the FMA's flops: AMD Zen 4 and
        // 5 (the bench's probe: 234 against 117 GFLOP/s a core on a Zen 4). On Intel cores it runs at
        // half of them (65-80 against 160-166 on an AMX Xeon, Sapphire Rapids or later), and the build's bf16
        // attention ran at 0.51-0.96x the AVX-512 build's (bench/results/cpu_sdpa_bf16_xeon_avx512_vs_dot.json),
        // so an Intel CPU without usable tiles keeps the AVX-512 build unless asked.
        r.preferred = r.amd ? Isa::Avx512Bf16 : Isa::Avx512;
    }
#endif
    return r;
}

const IsaSupport& support()
{
    static const IsaSupport s = read_support();
    return s;
}
} // namespace

Isa isa_best()
{
    return support().preferred;
}

Isa isa_widest()
{
    return support().widest;
}

bool cpu_is_amd()
{
    return support().amd;
}

bool cpu_two_fma512()
{
    return support().two_fma512;
}

namespace
{
// An environment value without the blanks around it ("AVX512", "amx\n" from a shell file, " 4": a
// value a user would read as the same is the same).
std::string env_trimmed(const char* e)
{
    std::string v(e, strnlen(e, 64));
    const size_t first = v.find_first_not_of(" \t\r\n");
    return first == std::string::npos ? std::string() : v.substr(first, v.find_last_not_of(" \t\r\n") - first + 1);
}

// An environment value as a message shows it: at most 40 characters, unprintable ones as '?'.
std::string env_shown(const char* e)
{
    std::string shown(e, strnlen(e, 40));
    for(char& c : shown)
        if(c < 0x20 || c > 0x7e)
            c = '?';
    return shown;
}
} // namespace

std::string panel_vectors_for_plan(int& out)
{
    out = cpu_two_fma512() ? 4 : 3;
    const char* e = std::getenv("HIPDNN_CPU_SDPA_PANEL_VECTORS");
    if(e == nullptr || e[0] == '\0')
        return "";
    const std::string v = env_trimmed(e);
    if(v == "3" || v == "4")
    {
        out = v[0] - '0';
        return "";
    }
    return "HIPDNN_CPU_SDPA_PANEL_VECTORS='" + env_shown(e) + "' is not 3 or 4 (unset: "
           + std::to_string(cpu_two_fma512() ? 4 : 3) + ", this CPU's default)";
}

namespace
{
const char* needs(Isa isa)
{
    switch(isa)
    {
    case Isa::Amx:
        return "AVX-512 F, DQ, VL, BW and BF16, AMX-TILE and AMX-BF16, and the OS's leave to use the tiles";
    case Isa::Avx512:
        return "AVX-512 F, DQ, VL and BW";
    case Isa::Avx512Bf16:
        return "AVX-512 F, DQ, VL, BW and BF16";
    default:
        return "AVX2, FMA and F16C";
    }
}
} // namespace

std::string isa_for_plan(Isa& out)
{
    const Isa best = isa_best();
    out = best;
    const char* e = std::getenv("HIPDNN_CPU_ISA");
    if(e != nullptr && e[0] != '\0')
    {
        // Matched without regard to case or surrounding blanks.
        std::string name = env_trimmed(e);
        for(char& c : name)
            c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        Isa want;
        if(name == "baseline")
            want = Isa::Baseline;
        else if(name == "avx2")
            want = Isa::Avx2;
        else if(name == "avx512")
            want = Isa::Avx512;
        else if(name == "avx512_bf16")
            want = Isa::Avx512Bf16;
        else if(name == "amx")
            want = Isa::Amx;
        else
        {
            return "HIPDNN_CPU_ISA='" + env_shown(e) + "' is not one of baseline, avx2, avx512, avx512_bf16, amx (unset: "
                   + isa_name(best) + ", this CPU's default)";
        }
        if(static_cast<int>(want) > static_cast<int>(isa_widest()))
            return std::string("HIPDNN_CPU_ISA=") + isa_name(want) + " asks for kernels this CPU cannot run (they need "
                   + needs(want) + "); the widest it has is " + isa_name(isa_widest());
        out = want;
        return "";
    }
    // The switches from before HIPDNN_CPU_ISA, still honoured.
    if(std::getenv("HIPDNN_CPU_ENGINE_BASELINE") != nullptr)
        out = Isa::Baseline;
    else if(std::getenv("HIPDNN_CPU_ENGINE_NO_AVX512") != nullptr && isa_has_avx512(best))
        out = Isa::Avx2;
    return "";
}

} // namespace hipdnn_cpu
