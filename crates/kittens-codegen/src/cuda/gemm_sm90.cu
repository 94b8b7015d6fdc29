// gemm_bf16 for Hopper: C (M x N, bf16) = A (M x K) . B^T (B is N x K), both row-major, fp32 accumulation.
// The Hopper schedule of seed 000 §3.3.1: producer/consumer warp specialisation. Warpgroup 0 is the
// producer (one thread issues TMA loads; the warpgroup gives registers back with setmaxnreg.dec); the
// other warpgroups are consumers (setmaxnreg.inc) that each own BM/CONSUMERS rows of the block tile and
// run async wgmma on it. Stages of shared memory pass between them on two mbarriers each: `full`
// (TMA bytes landed) and `empty` (every consumer thread finished reading). The grid is persistent, one
// block per SM, walking the tiles in groups of GROUP_M tile-rows so that concurrent blocks share A and B
// panels in L2. The constants in namespace cfg are emitted by kittens-codegen (`HopperGemm`).

struct TileCoord {
    u32 m, n;
};

// Grouped tile order: GROUP_M tile-rows at a time, column by column inside the group.
__device__ __forceinline__ TileCoord tile_coord(u32 t, u32 m_tiles, u32 n_tiles) {
    const u32 per_group = cfg::GROUP_M * n_tiles;
    const u32 first_m = (t / per_group) * cfg::GROUP_M;
    const u32 rows = min(cfg::GROUP_M, m_tiles - first_m);
    const u32 r = t % per_group;
    return TileCoord{first_m + r % rows, r / rows};
}

extern "C" __global__ void __launch_bounds__(cfg::THREADS, 1) KT_CLUSTER_ATTR
KERNEL_NAME(const __grid_constant__ CUtensorMap tma_a, const __grid_constant__ CUtensorMap tma_b,
            const __grid_constant__ CUtensorMap tma_c, bf16_t* __restrict__ c, u32 M, u32 N, u32 K) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // 128-byte swizzled tiles must start on 1024-byte boundaries (one 8-row swizzle atom).
    const u32 base = (kt::smem_u32(smem_raw) + 1023u) & ~1023u;
    // Shared memory: STAGES x (A tile | B tile), then (TMA-store epilogue) one C slab per consumer,
    // then the mbarriers.
    const u32 staging = base + cfg::STAGES * cfg::STAGE_BYTES;
    const u32 bars = staging + cfg::CONSUMERS * cfg::WG_C_BYTES;
    const u32 m_tiles = (M + cfg::BM - 1) / cfg::BM;
    const u32 n_tiles = (N + cfg::BN - 1) / cfg::BN;
    const u32 k_iters = (K + cfg::BK - 1) / cfg::BK;
    // With clusters of CLUSTER CTAs along M, a cluster walks units of CLUSTER vertically adjacent tiles
    // (same B panel); CTA `rank` takes tile-row CLUSTER * unit_row + rank and loads 1/CLUSTER of the B
    // tile, multicast to the whole cluster.
    const u32 m_units = (m_tiles + cfg::CLUSTER - 1) / cfg::CLUSTER;
    const u32 units = m_units * n_tiles;
    const u32 rank = cfg::CLUSTER > 1 ? kt::cluster_ctarank() : 0u;
    const u32 first_unit = blockIdx.x / cfg::CLUSTER, unit_step = gridDim.x / cfg::CLUSTER;
    const u32 wg = kt::warpgroup_id();

    if (threadIdx.x == 0) {
        for (u32 s = 0; s < cfg::STAGES; ++s) {
            kt::mbarrier_init(bars + 8 * s, 1);                                        // full[s]
            kt::mbarrier_init(bars + 8 * (cfg::STAGES + s), cfg::EMPTY_ARRIVALS);      // empty[s]
        }
        kt::fence_mbarrier_init();
        kt::fence_proxy_async();
    }
    if (cfg::CLUSTER > 1)
        kt::cluster_sync(); // the peers' barriers exist before anyone multicasts or arrives remotely
    else
        __syncthreads();

    if (wg == 0) {
        // ---- producer ----
        kt::setmaxnreg_dec<cfg::PRODUCER_REGS>();
        if (threadIdx.x == 0) {
            kt::tma_prefetch_descriptor(&tma_a);
            kt::tma_prefetch_descriptor(&tma_b);
            u32 it = 0;
            for (u32 t = first_unit; t < units; t += unit_step) {
                TileCoord tc = tile_coord(t, m_units, n_tiles);
                tc.m = tc.m * cfg::CLUSTER + rank;
                for (u32 k = 0; k < k_iters; ++k, ++it) {
                    const u32 s = it % cfg::STAGES;
                    const u32 phase = (it / cfg::STAGES) & 1u;
                    kt::mbarrier_wait(bars + 8 * (cfg::STAGES + s), phase ^ 1u);
                    const u32 full = bars + 8 * s;
                    const u32 sa = base + s * cfg::STAGE_BYTES;
                    kt::mbarrier_arrive_expect_tx(full, cfg::STAGE_BYTES);
                    kt::tma_load_2d(sa, &tma_a, full, (int)(k * cfg::BK), (int)(tc.m * cfg::BM));
                    if (cfg::CLUSTER > 1) {
                        const u32 part = rank * (cfg::BN / cfg::CLUSTER);
                        kt::tma_load_2d_multicast(sa + cfg::A_BYTES + part * cfg::BK * 2, &tma_b, full,
                                                  (int)(k * cfg::BK), (int)(tc.n * cfg::BN + part),
                                                  (unsigned short)((1u << cfg::CLUSTER) - 1));
                    } else {
                        kt::tma_load_2d(sa + cfg::A_BYTES, &tma_b, full, (int)(k * cfg::BK), (int)(tc.n * cfg::BN));
                    }
                }
            }
        }
    } else {
        // ---- consumers ----
        kt::setmaxnreg_inc<cfg::CONSUMER_REGS>();
        const u32 cw = wg - 1;
        // Hands a stage back. Alone, every consumer thread arrives on its own CTA's barrier; in a cluster
        // the producers of every CTA write this stage (multicast), so lane 0 of each consumer warp
        // arrives on every CTA's barrier once its warp's wgmmas are done.
        auto release = [&](u32 empty_bar) {
            if (cfg::CLUSTER == 1) {
                kt::mbarrier_arrive(empty_bar);
            } else if (kt::lane_id() == 0) {
#pragma unroll
                for (u32 r = 0; r < cfg::CLUSTER; ++r) kt::mbarrier_arrive_cluster(kt::map_shared_to_cta(empty_bar, r));
            }
        };
        float acc[cfg::BN / 2];
        u32 it = 0;
        for (u32 t = first_unit; t < units; t += unit_step) {
            TileCoord tc = tile_coord(t, m_units, n_tiles);
            tc.m = tc.m * cfg::CLUSTER + rank;
            for (u32 k = 0; k < k_iters; ++k, ++it) {
                const u32 s = it % cfg::STAGES;
                kt::mbarrier_wait(bars + 8 * s, (it / cfg::STAGES) & 1u);
                const u32 sa = base + s * cfg::STAGE_BYTES + cw * cfg::WG_A_BYTES;
                const u32 sb = base + s * cfg::STAGE_BYTES + cfg::A_BYTES;
                kt::wgmma_fence();
#pragma unroll
                for (u32 kk = 0; kk < cfg::BK / 16; ++kk) {
                    // 16 bf16 of K are 32 bytes along the swizzled 128-byte row.
                    WGMMA(acc, kt::desc_kmajor_sw128(sa + kk * 32), kt::desc_kmajor_sw128(sb + kk * 32),
                          (k > 0 || kk > 0) ? 1u : 0u);
                }
                kt::wgmma_commit();
                if (k > 0) {
                    // The previous stage's wgmmas are done: hand its buffers back to the producer.
                    kt::wgmma_wait<1>();
                    release(bars + 8 * (cfg::STAGES + (it - 1) % cfg::STAGES));
                }
            }
            kt::wgmma_wait<0>();
            release(bars + 8 * (cfg::STAGES + (it - 1) % cfg::STAGES));

            // Epilogue. The m64nN accumulator layout (PTX ISA, "wgmma .m64nNk16 D fragment"): thread
            // (warp w, lane l) holds rows 16w + l/4 and +8, columns 8i + 2(l%4) and +1.
            const u32 tid = threadIdx.x % 128u, w = tid / 32u, l = tid % 32u;
#if KT_TMA_EPILOGUE
            // Through shared memory: the slab is BN/64 boxes of 64 rows x 128 bytes in the 128-byte
            // swizzle (conflict-free for these stores), written out by TMA while the next tile starts.
            const u32 slab = staging + cw * cfg::WG_C_BYTES;
            if (tid == 0) kt::tma_store_wait_read<0>(); // the previous tile's store has read the slab
            kt::named_barrier(1 + cw, 128);
#pragma unroll
            for (u32 i = 0; i < cfg::BN / 8; ++i) {
                const u32 col = i * 8u + (l % 4u) * 2u;
#pragma unroll
                for (u32 h = 0; h < 2; ++h) {
                    const u32 row = w * 16u + l / 4u + 8u * h;
                    const u32 off = (col / 64u) * (cfg::WG_M * 128u) + row * 128u + (col % 64u) * 2u;
                    kt::st_shared_b32(slab + kt::swizzle128(off), kt::pack_bf16x2(acc[4 * i + 2 * h], acc[4 * i + 2 * h + 1]));
                }
            }
            kt::fence_proxy_async();
            kt::named_barrier(1 + cw, 128);
            if (tid == 0) {
#pragma unroll
                for (u32 j = 0; j < cfg::BN / 64; ++j)
                    kt::tma_store_2d(&tma_c, slab + j * cfg::WG_M * 128u, (int)(tc.n * cfg::BN + j * 64u),
                                     (int)(tc.m * cfg::BM + cw * cfg::WG_M));
                kt::tma_store_commit();
            }
#else
            // Straight from registers, bf16 pairs, predicated on the edges of C.
            const u32 row0 = tc.m * cfg::BM + cw * cfg::WG_M + w * 16u + l / 4u;
            const u32 col0 = tc.n * cfg::BN + (l % 4u) * 2u;
#pragma unroll
            for (u32 i = 0; i < cfg::BN / 8; ++i) {
                const u32 col = col0 + i * 8u;
                if (col < N) {
                    if (row0 < M)
                        kt::st_global_b32(c + (u64)row0 * N + col, kt::pack_bf16x2(acc[4 * i], acc[4 * i + 1]));
                    if (row0 + 8u < M)
                        kt::st_global_b32(c + (u64)(row0 + 8u) * N + col,
                                          kt::pack_bf16x2(acc[4 * i + 2], acc[4 * i + 3]));
                }
            }
#endif
        }
#if KT_TMA_EPILOGUE
        if (threadIdx.x % 128u == 0) kt::tma_store_wait_all();
#endif
    }
    // No CTA may leave while a peer can still arrive on its barriers or multicast into it.
    if (cfg::CLUSTER > 1) kt::cluster_sync();
}
