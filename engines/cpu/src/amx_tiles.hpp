// AMX tile configuration shared by the SDPA forward's tile kernel (sdpa_fwd.inl) and the backward's
// (sdpa_bwd.inl): palette 1 with all eight tiles at 16 rows x 64 bytes (16 fp32 accumulators a row,
// or 32 bf16 operands). Included only by builds compiled with -mamx-tile -mamx-bf16.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace hipdnn_cpu
{

struct alignas(64) AmxTileConfig
{
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

// Loads the configuration into this thread's tile state (release with _tile_release()).
inline void amx_configure_16x64()
{
    AmxTileConfig c;
    std::memset(&c, 0, sizeof(c));
    c.palette_id = 1;
    for(int t = 0; t < 8; ++t)
    {
        c.rows[t] = 16;
        c.colsb[t] = 64;
    }
    _tile_loadconfig(&c);
}

} // namespace hipdnn_cpu
