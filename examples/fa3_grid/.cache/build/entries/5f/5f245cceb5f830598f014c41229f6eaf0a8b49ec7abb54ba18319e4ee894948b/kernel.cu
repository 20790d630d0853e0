#if defined(_MSC_VER) && !defined(__clang__) && _MSC_VER < 1940
#define _tl_orig_alignas alignas
#define alignas(N) _tl_orig_alignas((N) <= 64 ? (N) : 64)
#include <cuda.h>
#undef alignas
#define alignas _tl_orig_alignas
#endif
#include <tl_templates/cuda/instruction/wgmma.h>
#include <tl_templates/cuda/intrin.h>
#include <tl_templates/cuda/barrier.h>
#include <tl_templates/cuda/copy_sm90.h>
#include <math_constants.h>
#include <tl_templates/cuda/reduce.h>
#include <tl_templates/cuda/scan.h>
#include <tl_templates/cuda/ldsm.h>
#include <tl_templates/cuda/threadblock_swizzle.h>
#include <tl_templates/cuda/debug.h>
#ifdef ENABLE_BF16
#include <tl_templates/cuda/cuda_bf16_fallbacks.cuh>
#endif

extern "C" __global__ void attn_bf16_d128_causal_128x128_t384_s2_fa3_pers_snake_sm90_750124_kernel(__grid_constant__ const CUtensorMap K_desc, __grid_constant__ const CUtensorMap O_desc, __grid_constant__ const CUtensorMap Q_desc, __grid_constant__ const CUtensorMap V_desc);
extern "C" __global__ void __launch_bounds__(384, 1) attn_bf16_d128_causal_128x128_t384_s2_fa3_pers_snake_sm90_750124_kernel(__grid_constant__ const CUtensorMap K_desc, __grid_constant__ const CUtensorMap O_desc, __grid_constant__ const CUtensorMap Q_desc, __grid_constant__ const CUtensorMap V_desc) {
  extern __shared__ __align__(1024) uchar buf_dyn_shmem[];
  void* K_ring = ((void*)((char*)buf_dyn_shmem + 0));
  void* V_ring = ((void*)((char*)buf_dyn_shmem + 65536));
  void* Q_0 = ((void*)((char*)buf_dyn_shmem + 131072));
  void* Q_1 = ((void*)((char*)buf_dyn_shmem + 147456));
  __shared__ __align__(16) uint64_t q_full_mem[2];
  auto q_full = reinterpret_cast<Barrier*>(q_full_mem);
  __shared__ __align__(16) uint64_t k_full_mem[2];
  auto k_full = reinterpret_cast<Barrier*>(k_full_mem);
  __shared__ __align__(16) uint64_t v_full_mem[2];
  auto v_full = reinterpret_cast<Barrier*>(v_full_mem);
  __shared__ __align__(16) uint64_t k_empty_mem[2];
  auto k_empty = reinterpret_cast<Barrier*>(k_empty_mem);
  __shared__ __align__(16) uint64_t v_empty_mem[2];
  auto v_empty = reinterpret_cast<Barrier*>(v_empty_mem);
  __shared__ __align__(16) uint64_t q_empty_mem[2];
  auto q_empty = reinterpret_cast<Barrier*>(q_empty_mem);
  int kv_done[1];
  float acc_o_0[64];
  float row_sum_0[2];
  float row_max_0[2];
  float S_0[64];
  float prev_max_0[2];
  float row_max_0_clear[2];
  float rescale_0[2];
  float block_sum_0[2];
  bfloat16_t P_0[64];
  float row_max_0_clear_1[2];
  float acc_o_1[64];
  float row_sum_1[2];
  float row_max_1[2];
  float S_1[64];
  float prev_max_1[2];
  float row_max_1_clear[2];
  float rescale_1[2];
  float block_sum_1[2];
  bfloat16_t P_1[64];
  float row_max_1_clear_1[2];
  if (tl::tl_shuffle_elect<0>()) {
    tl::prefetch_tma_descriptor(K_desc);
    tl::prefetch_tma_descriptor(Q_desc);
    tl::prefetch_tma_descriptor(V_desc);
    tl::prefetch_tma_descriptor(O_desc);
  }
  if (tl::tl_shuffle_elect<0>()) {
    q_full[0].init(32);
    q_full[1].init(32);
    k_full[0].init(32);
    k_full[1].init(32);
    v_full[0].init(32);
    v_full[1].init(32);
    k_empty[0].init(256);
    k_empty[1].init(256);
    v_empty[0].init(256);
    v_empty[1].init(256);
    q_empty[0].init(128);
    q_empty[1].init(128);
  }
  tl::fence_barrier_init();
  __syncthreads();
  kv_done[0] = 0;
  if (((int)threadIdx.x) < 128) {
    tl::warpgroup_reg_dealloc<24>();
    if (((int)threadIdx.x) < 32) {
      for (int r = 0; r < ((((int)blockIdx.x) + 4096) / 132); ++r) {
        int kb0 = kv_done[0];
        int condval;
        if (((r % 2) == 0)) {
          condval = ((int)blockIdx.x);
        } else {
          condval = (131 - ((int)blockIdx.x));
        }
        for (int kb = 0; kb < (33 - ((((r * 33) + (condval >> 2)) & 255) >> 3)); ++kb) {
          int condval_1;
          if (((r % 2) == 0)) {
            condval_1 = ((int)blockIdx.x);
          } else {
            condval_1 = (131 - ((int)blockIdx.x));
          }
          if ((((((r * 33) + (condval_1 >> 2)) & 255) >> 3) + kb) < 32) {
            k_empty[((kb0 + kb) & 1)].wait(((((kb0 + kb) >> 1) + 1) & 1));
            if (tl::tl_shuffle_elect<32>()) {
              k_full[((kb0 + kb) & 1)].expect_transaction(32768);
              #pragma unroll
              for (int i = 0; i < 2; ++i) {
                int condval_2;
                if (((r % 2) == 0)) {
                  condval_2 = ((int)blockIdx.x);
                } else {
                  condval_2 = (131 - ((int)blockIdx.x));
                }
                int condval_3;
                if (((r % 2) == 0)) {
                  condval_3 = ((int)blockIdx.x);
                } else {
                  condval_3 = (131 - ((int)blockIdx.x));
                }
                tl::tma_load(K_desc, k_full[((kb0 + kb) & 1)], (&(((bfloat16_t*)K_ring)[((((kb0 + kb) & 1) * 16384) + (i * 8192))])), (i * 64), (kb * 128), (((r * 33) + (condval_2 >> 2)) & 7), (((r * 33) + (condval_3 >> 2)) >> 8));
              }
            }
            k_full[((kb0 + kb) & 1)].arrive();
          }
          if (kb == 0) {
            q_empty[0].wait(((r + 1) & 1));
            if (tl::tl_shuffle_elect<32>()) {
              q_full[0].expect_transaction(16384);
              #pragma unroll
              for (int i_1 = 0; i_1 < 2; ++i_1) {
                int condval_4;
                if (((r % 2) == 0)) {
                  condval_4 = ((int)blockIdx.x);
                } else {
                  condval_4 = (131 - ((int)blockIdx.x));
                }
                int condval_5;
                if (((r % 2) == 0)) {
                  condval_5 = ((int)blockIdx.x);
                } else {
                  condval_5 = (131 - ((int)blockIdx.x));
                }
                int condval_6;
                if (((r % 2) == 0)) {
                  condval_6 = ((int)blockIdx.x);
                } else {
                  condval_6 = (131 - ((int)blockIdx.x));
                }
                tl::tma_load(Q_desc, q_full[0], (&(((bfloat16_t*)Q_0)[(i_1 * 4096)])), (i_1 * 64), (3968 - (((((r * 33) + (condval_4 >> 2)) & 255) >> 3) * 128)), (((r * 132) + condval_5) & 31), (((r * 33) + (condval_6 >> 2)) >> 8));
              }
            }
            q_full[0].arrive();
            q_empty[1].wait(((r + 1) & 1));
            if (tl::tl_shuffle_elect<32>()) {
              q_full[1].expect_transaction(16384);
              #pragma unroll
              for (int i_2 = 0; i_2 < 2; ++i_2) {
                int condval_7;
                if (((r % 2) == 0)) {
                  condval_7 = ((int)blockIdx.x);
                } else {
                  condval_7 = (131 - ((int)blockIdx.x));
                }
                int condval_8;
                if (((r % 2) == 0)) {
                  condval_8 = ((int)blockIdx.x);
                } else {
                  condval_8 = (131 - ((int)blockIdx.x));
                }
                int condval_9;
                if (((r % 2) == 0)) {
                  condval_9 = ((int)blockIdx.x);
                } else {
                  condval_9 = (131 - ((int)blockIdx.x));
                }
                tl::tma_load(Q_desc, q_full[1], (&(((bfloat16_t*)Q_1)[(i_2 * 4096)])), (i_2 * 64), (4032 - (((((r * 33) + (condval_7 >> 2)) & 255) >> 3) * 128)), (((r * 132) + condval_8) & 31), (((r * 33) + (condval_9 >> 2)) >> 8));
              }
            }
            q_full[1].arrive();
          }
          if (0 < kb) {
            v_empty[(((kb0 + kb) + 1) & 1)].wait((((((kb0 + kb) - 1) >> 1) + 1) & 1));
            if (tl::tl_shuffle_elect<32>()) {
              v_full[(((kb0 + kb) + 1) & 1)].expect_transaction(32768);
              #pragma unroll
              for (int i_3 = 0; i_3 < 2; ++i_3) {
                int condval_10;
                if (((r % 2) == 0)) {
                  condval_10 = ((int)blockIdx.x);
                } else {
                  condval_10 = (131 - ((int)blockIdx.x));
                }
                int condval_11;
                if (((r % 2) == 0)) {
                  condval_11 = ((int)blockIdx.x);
                } else {
                  condval_11 = (131 - ((int)blockIdx.x));
                }
                tl::tma_load(V_desc, v_full[(((kb0 + kb) + 1) & 1)], (&(((bfloat16_t*)V_ring)[(((((kb0 + kb) + 1) & 1) * 16384) + (i_3 * 8192))])), (i_3 * 64), ((kb * 128) - 128), (((r * 33) + (condval_10 >> 2)) & 7), (((r * 33) + (condval_11 >> 2)) >> 8));
              }
            }
            v_full[(((kb0 + kb) + 1) & 1)].arrive();
          }
        }
        int condval_12;
        if (((r % 2) == 0)) {
          condval_12 = ((int)blockIdx.x);
        } else {
          condval_12 = (131 - ((int)blockIdx.x));
        }
        kv_done[0] = ((kb0 + 32) - ((((r * 33) + (condval_12 >> 2)) & 255) >> 3));
      }
    }
  } else {
    if (((int)threadIdx.x) < 256) {
      tl::warpgroup_reg_alloc<240>();
      tl::__named_barrier_arrive(15, 256);
      for (int r_1 = 0; r_1 < ((((int)blockIdx.x) + 4096) / 132); ++r_1) {
        int kb0_1 = kv_done[0];
        #pragma unroll
        for (int i_4 = 0; i_4 < 16; ++i_4) {
          float broadcast_var = 0x0p+0f/*0.000000e+00*/;
          *(float4*)(acc_o_0 + (i_4 * 4)) = make_float4(broadcast_var, broadcast_var, broadcast_var, broadcast_var);
        }
        float broadcast_var_1 = 0x0p+0f/*0.000000e+00*/;
        *(float2*)(row_sum_0 + 0) = make_float2(broadcast_var_1, broadcast_var_1);
        float broadcast_var_2 = -CUDART_INF_F;
        *(float2*)(row_max_0 + 0) = make_float2(broadcast_var_2, broadcast_var_2);
        q_full[0].wait((r_1 & 1));
        k_full[(kb0_1 & 1)].wait(((kb0_1 & 3) >> 1));
        tl::__sync_thread_partial(15, 256);
        {
          tl::GmmaDescriptor desc_a;
          tl::GmmaDescriptor desc_b;
          tl::initialize_wgmma_descriptor<1, 1, 64>(desc_a, (&(((bfloat16_t*)Q_0)[0])));
          tl::initialize_wgmma_descriptor<1, 1, 64>(desc_b, (&(((bfloat16_t*)K_ring)[0])));
          tl::increase_descriptor_offset<int>(desc_b, ((kb0_1 & 1) * 32768));
          tl::warpgroup_fence_operand(reinterpret_cast<float*>(S_0 + 0), 64);
          tl::warpgroup_arrive();
          #pragma unroll
          for (int ki = 0; ki < 8; ++ki) {
            tl::wgmma_ss<tl::DataType::kBFloat16, tl::DataType::kBFloat16, tl::DataType::kFloat32, 64, 128, 16, false, false, 1, 1>(uint64_t(desc_a + ((((ki >> 2) * 8192) + ((ki & 3) * 32)) >> 4)), uint64_t(desc_b + ((((ki >> 2) * 16384) + ((ki & 3) * 32)) >> 4)), ((uint32_t*)(S_0 + 0)), ((0 < ki) ? 1 : 0));
          }
          tl::warpgroup_commit_batch();
          tl::warpgroup_fence_operand(reinterpret_cast<float*>(S_0 + 0), 64);
        }
        tl::__named_barrier_arrive(14, 256);
        tl::wait_wgmma<0>();
        tl::warpgroup_fence_operand(reinterpret_cast<float*>(S_0 + 0), 64);
        k_empty[(kb0_1 & 1)].arrive();
        int condval_13;
        if (((r_1 % 2) == 0)) {
          condval_13 = ((int)blockIdx.x);
        } else {
          condval_13 = (131 - ((int)blockIdx.x));
        }
        if (991 < (((r_1 * 132) + condval_13) & 1023)) {
          #pragma unroll
          for (int i_5 = 0; i_5 < 64; ++i_5) {
            float condval_14;
            if (((((((i_5 >> 2) * 8) + ((((int)threadIdx.x) & 3) * 2)) + (i_5 & 1)) + 64) <= ((((((int)threadIdx.x) >> 5) * 16) + (((i_5 & 3) >> 1) * 8)) + ((((int)threadIdx.x) & 31) >> 2)))) {
              condval_14 = S_0[i_5];
            } else {
              condval_14 = -CUDART_INF_F;
            }
            S_0[i_5] = condval_14;
          }
        }
        *(float2*)(prev_max_0 + 0) = *(float2*)(row_max_0 + 0);
        #pragma unroll
        for (int i_6 = 0; i_6 < 2; ++i_6) {
          row_max_0_clear[i_6] = -CUDART_INF_F;
          #pragma unroll
          for (int rv = 0; rv < 32; ++rv) {
            row_max_0_clear[i_6] = max(row_max_0_clear[i_6], S_0[((((rv & 15) * 4) + (i_6 * 2)) + (rv >> 4))]);
          }
          row_max_0_clear[i_6] = tl::AllReduce<tl::MaxOp, 4, 1, 128, tl::NamedBarrier<128>>::run(row_max_0_clear[i_6]);
          row_max_0[i_6] = max(row_max_0[i_6], row_max_0_clear[i_6]);
        }
        float broadcast_var_3 = 0x1.0527dbd87e24dp-3f/*1.275174e-01*/;
        float broadcast_var_4 = 0x1.0527dbd87e24dp-3f/*1.275174e-01*/;
        float2 __1;
        float2 __2;
          float2 __3;
            float2 v_ = *(float2*)(prev_max_0 + 0);
            float2 v__1 = make_float2(broadcast_var_3, broadcast_var_3);
            __3.x = (v_.x*v__1.x);
            __3.y = (v_.y*v__1.y);
          float2 __4;
            float2 v__2 = *(float2*)(row_max_0 + 0);
            float2 v__3 = make_float2(broadcast_var_4, broadcast_var_4);
            __4.x = (v__2.x*v__3.x);
            __4.y = (v__2.y*v__3.y);
          __2.x = (__3.x-__4.x);
          __2.y = (__3.y-__4.y);
        __1.x = exp2f(__2.x);
        __1.y = exp2f(__2.y);
        *(float2*)(rescale_0 + 0) = __1;
        #pragma unroll
        for (int i_7 = 0; i_7 < 32; ++i_7) {
          float broadcast_var_5 = 0x1.0527dbd87e24dp-3f/*1.275174e-01*/;
          float2 __5;
          float2 __6;
            float2 __7;
              float2 v__4 = *(float2*)(S_0 + (i_7 * 2));
              float2 v__5 = make_float2(broadcast_var_5, broadcast_var_5);
              __7.x = (v__4.x*v__5.x);
              __7.y = (v__4.y*v__5.y);
            float2 v__6 = make_float2((row_max_0[(i_7 & 1)] * 0x1.0527dbd87e24dp-3f/*1.275174e-01*/), (row_max_0[(i_7 & 1)] * 0x1.0527dbd87e24dp-3f/*1.275174e-01*/));
            __6.x = (__7.x-v__6.x);
            __6.y = (__7.y-v__6.y);
          __5.x = exp2f(__6.x);
          __5.y = exp2f(__6.y);
          *(float2*)(S_0 + (i_7 * 2)) = __5;
        }
        #pragma unroll
        for (int i_8 = 0; i_8 < 2; ++i_8) {
          block_sum_0[i_8] = 0x0p+0f/*0.000000e+00*/;
          #pragma unroll
          for (int rv_1 = 0; rv_1 < 32; ++rv_1) {
            block_sum_0[i_8] = (block_sum_0[i_8] + S_0[((((rv_1 & 15) * 4) + (i_8 * 2)) + (rv_1 >> 4))]);
          }
          block_sum_0[i_8] = tl::AllReduce<tl::SumOp, 4, 1, 128, tl::NamedBarrier<128>>::run(block_sum_0[i_8]);
        }
        float2 __8;
          float2 __9;
            float2 v__7 = *(float2*)(row_sum_0 + 0);
            float2 v__8 = *(float2*)(rescale_0 + 0);
            __9.x = (v__7.x*v__8.x);
            __9.y = (v__7.y*v__8.y);
          float2 v__9 = *(float2*)(block_sum_0 + 0);
          __8.x = (__9.x+v__9.x);
          __8.y = (__9.y+v__9.y);
        *(float2*)(row_sum_0 + 0) = __8;
        #pragma unroll
        for (int i_9 = 0; i_9 < 16; ++i_9) {
          uint2 __10;
          float4 v__10 = *(float4*)(S_0 + (i_9 * 4));
          (reinterpret_cast<__nv_bfloat162*>(&__10))[0] = __float22bfloat162_rn(((float2*)(&v__10))[0]);
          (reinterpret_cast<__nv_bfloat162*>(&__10))[1] = __float22bfloat162_rn(((float2*)(&v__10))[1]);
          *(uint2*)(P_0 + (i_9 * 4)) = __10;
        }
        int condval_15;
        if (((r_1 % 2) == 0)) {
          condval_15 = ((int)blockIdx.x);
        } else {
          condval_15 = (131 - ((int)blockIdx.x));
        }
        for (int kb_1 = 1; kb_1 < (32 - ((((r_1 * 33) + (condval_15 >> 2)) & 255) >> 3)); ++kb_1) {
          k_full[((kb0_1 + kb_1) & 1)].wait((((kb0_1 + kb_1) & 3) >> 1));
          tl::__sync_thread_partial(15, 256);
          {
            tl::GmmaDescriptor desc_a_1;
            tl::GmmaDescriptor desc_b_1;
            tl::initialize_wgmma_descriptor<1, 1, 64>(desc_a_1, (&(((bfloat16_t*)Q_0)[0])));
            tl::initialize_wgmma_descriptor<1, 1, 64>(desc_b_1, (&(((bfloat16_t*)K_ring)[0])));
            tl::increase_descriptor_offset<int>(desc_b_1, (((kb0_1 + kb_1) & 1) * 32768));
            tl::warpgroup_fence_operand(reinterpret_cast<float*>(S_0 + 0), 64);
            tl::warpgroup_arrive();
            #pragma unroll
            for (int ki_1 = 0; ki_1 < 8; ++ki_1) {
              tl::wgmma_ss<tl::DataType::kBFloat16, tl::DataType::kBFloat16, tl::DataType::kFloat32, 64, 128, 16, false, false, 1, 1>(uint64_t(desc_a_1 + ((((ki_1 >> 2) * 8192) + ((ki_1 & 3) * 32)) >> 4)), uint64_t(desc_b_1 + ((((ki_1 >> 2) * 16384) + ((ki_1 & 3) * 32)) >> 4)), ((uint32_t*)(S_0 + 0)), ((0 < ki_1) ? 1 : 0));
            }
            tl::warpgroup_commit_batch();
            tl::warpgroup_fence_operand(reinterpret_cast<float*>(S_0 + 0), 64);
          }
          v_full[(((kb0_1 + kb_1) + 1) & 1)].wait(((((kb0_1 + kb_1) + 3) & 3) >> 1));
          {
            tl::GmmaDescriptor desc_b_2;
            tl::initialize_wgmma_descriptor<1, 1024, 64>(desc_b_2, (&(((bfloat16_t*)V_ring)[0])));
            tl::increase_descriptor_offset<int>(desc_b_2, ((((kb0_1 + kb_1) + 1) & 1) * 32768));
            tl::warpgroup_fence_operand(reinterpret_cast<uint32_t*>(P_0 + 0), 32);
            tl::warpgroup_fence_operand(reinterpret_cast<float*>(acc_o_0 + 0), 64);
            tl::warpgroup_arrive();
            #pragma unroll
            for (int ki_2 = 0; ki_2 < 8; ++ki_2) {
              tl::wgmma_rs<tl::DataType::kBFloat16, tl::DataType::kBFloat16, tl::DataType::kFloat32, 64, 128, 16, false, true, 1, 1>(reinterpret_cast<const uint32_t*>(P_0 + (ki_2 * 8)), uint64_t(desc_b_2 + ((ki_2 * 2048) >> 4)), reinterpret_cast<uint32_t*>(acc_o_0 + 0), 1);
            }
            tl::warpgroup_commit_batch();
            tl::warpgroup_fence_operand(reinterpret_cast<float*>(acc_o_0 + 0), 64);
            tl::warpgroup_fence_operand(reinterpret_cast<uint32_t*>(P_0 + 0), 32);
          }
          tl::__named_barrier_arrive(14, 256);
          tl::wait_wgmma<1>();
          tl::warpgroup_fence_operand(reinterpret_cast<float*>(S_0 + 0), 64);
          k_empty[((kb0_1 + kb_1) & 1)].arrive();
          int condval_16;
          if (((r_1 % 2) == 0)) {
            condval_16 = ((int)blockIdx.x);
          } else {
            condval_16 = (131 - ((int)blockIdx.x));
          }
          if (((30 - ((((r_1 * 33) + (condval_16 >> 2)) & 255) >> 3)) - kb_1) < 0) {
            #pragma unroll
            for (int i_10 = 0; i_10 < 64; ++i_10) {
              int condval_18;
              if (((r_1 % 2) == 0)) {
                condval_18 = ((int)blockIdx.x);
              } else {
                condval_18 = (131 - ((int)blockIdx.x));
              }
              float condval_17;
              if ((((((kb_1 * 128) + ((i_10 >> 2) * 8)) + ((((int)threadIdx.x) & 3) * 2)) + (i_10 & 1)) <= ((((((((int)threadIdx.x) >> 5) * 16) + (((i_10 & 3) >> 1) * 8)) + ((((int)threadIdx.x) & 31) >> 2)) + 3904) - (((((r_1 * 33) + (condval_18 >> 2)) & 255) >> 3) * 128)))) {
                condval_17 = S_0[i_10];
              } else {
                condval_17 = -CUDART_INF_F;
              }
              S_0[i_10] = condval_17;
            }
          }
          *(float2*)(prev_max_0 + 0) = *(float2*)(row_max_0 + 0);
          #pragma unroll
          for (int i_11 = 0; i_11 < 2; ++i_11) {
            row_max_0_clear_1[i_11] = -CUDART_INF_F;
            #pragma unroll
            for (int rv_2 = 0; rv_2 < 32; ++rv_2) {
              row_max_0_clear_1[i_11] = max(row_max_0_clear_1[i_11], S_0[((((rv_2 & 15) * 4) + (i_11 * 2)) + (rv_2 >> 4))]);
            }
            row_max_0_clear_1[i_11] = tl::AllReduce<tl::MaxOp, 4, 1, 128, tl::NamedBarrier<128>>::run(row_max_0_clear_1[i_11]);
            row_max_0[i_11] = max(row_max_0[i_11], row_max_0_clear_1[i_11]);
          }
          float broadcast_var_6 = 0x1.0527dbd87e24dp-3f/*1.275174e-01*/;
          float broadcast_var_7 = 0x1.0527dbd87e24dp-3f/*1.275174e-01*/;
          float2 __11;
          float2 __12;
            float2 __13;
              float2 v__11 = *(float2*)(prev_max_0 + 0);
              float2 v__12 = make_float2(broadcast_var_6, broadcast_var_6);
              __13.x = (v__11.x*v__12.x);
              __13.y = (v__11.y*v__12.y);
            float2 __14;
              float2 v__13 = *(float2*)(row_max_0 + 0);
              float2 v__14 = make_float2(broadcast_var_7, broadcast_var_7);
              __14.x = (v__13.x*v__14.x);
              __14.y = (v__13.y*v__14.y);
            __12.x = (__13.x-__14.x);
            __12.y = (__13.y-__14.y);
          __11.x = exp2f(__12.x);
          __11.y = exp2f(__12.y);
          *(float2*)(rescale_0 + 0) = __11;
          #pragma unroll
          for (int i_12 = 0; i_12 < 32; ++i_12) {
            float broadcast_var_8 = 0x1.0527dbd87e24dp-3f/*1.275174e-01*/;
            float2 __15;
            float2 __16;
              float2 __17;
                float2 v__15 = *(float2*)(S_0 + (i_12 * 2));
                float2 v__16 = make_float2(broadcast_var_8, broadcast_var_8);
                __17.x = (v__15.x*v__16.x);
                __17.y = (v__15.y*v__16.y);
              float2 v__17 = make_float2((row_max_0[(i_12 & 1)] * 0x1.0527dbd87e24dp-3f/*1.275174e-01*/), (row_max_0[(i_12 & 1)] * 0x1.0527dbd87e24dp-3f/*1.275174e-01*/));
              __16.x = (__17.x-v__17.x);
              __16.y = (__17.y-v__17.y);
            __15.x = exp2f(__16.x);
            __15.y = exp2f(__16.y);
            *(float2*)(S_0 + (i_12 * 2)) = __15;
          }
          #pragma unroll
          for (int i_13 = 0; i_13 < 2; ++i_13) {
            block_sum_0[i_13] = 0x0p+0f/*0.000000e+00*/;
            #pragma unroll
            for (int rv_3 = 0; rv_3 < 32; ++rv_3) {
              block_sum_0[i_13] = (block_sum_0[i_13] + S_0[((((rv_3 & 15) * 4) + (i_13 * 2)) + (rv_3 >> 4))]);
            }
            block_sum_0[i_13] = tl::AllReduce<tl::SumOp, 4, 1, 128, tl::NamedBarrier<128>>::run(block_sum_0[i_13]);
          }
          float2 __18;
            float2 __19;
              float2 v__18 = *(float2*)(row_sum_0 + 0);
              float2 v__19 = *(float2*)(rescale_0 + 0);
              __19.x = (v__18.x*v__19.x);
              __19.y = (v__18.y*v__19.y);
            float2 v__20 = *(float2*)(block_sum_0 + 0);
            __18.x = (__19.x+v__20.x);
            __18.y = (__19.y+v__20.y);
          *(float2*)(row_sum_0 + 0) = __18;
          tl::wait_wgmma<0>();
          tl::warpgroup_fence_operand(reinterpret_cast<float*>(acc_o_0 + 0), 64);
          v_empty[(((kb0_1 + kb_1) + 1) & 1)].arrive();
          #pragma unroll
          for (int i_14 = 0; i_14 < 16; ++i_14) {
            uint2 __20;
            float4 v__21 = *(float4*)(S_0 + (i_14 * 4));
            (reinterpret_cast<__nv_bfloat162*>(&__20))[0] = __float22bfloat162_rn(((float2*)(&v__21))[0]);
            (reinterpret_cast<__nv_bfloat162*>(&__20))[1] = __float22bfloat162_rn(((float2*)(&v__21))[1]);
            *(uint2*)(P_0 + (i_14 * 4)) = __20;
          }
          #pragma unroll
          for (int i_15 = 0; i_15 < 32; ++i_15) {
            float2 __21;
              float2 v__22 = *(float2*)(acc_o_0 + (i_15 * 2));
              float2 v__23 = make_float2(rescale_0[(i_15 & 1)], rescale_0[(i_15 & 1)]);
              __21.x = (v__22.x*v__23.x);
              __21.y = (v__22.y*v__23.y);
            *(float2*)(acc_o_0 + (i_15 * 2)) = __21;
          }
        }
                int condval_19;
        if (((r_1 % 2) == 0)) {
          condval_19 = ((int)blockIdx.x);
        } else {
          condval_19 = (131 - ((int)blockIdx.x));
        }
        int condval_20;
        if (((r_1 % 2) == 0)) {
          condval_20 = ((int)blockIdx.x);
        } else {
          condval_20 = (131 - ((int)blockIdx.x));
        }
        int condval_21;
        if (((r_1 % 2) == 0)) {
          condval_21 = ((int)blockIdx.x);
        } else {
          condval_21 = (131 - ((int)blockIdx.x));
        }
v_full[(((kb0_1 + 1) - ((((r_1 * 33) + (condval_20 >> 2)) & 255) >> 3)) & 1)].wait(((((kb0_1 + 3) - ((((r_1 * 33) + (condval_21 >> 2)) & 255) >> 3)) & 3) >> 1));
        {
          tl::GmmaDescriptor desc_b_3;
          tl::initialize_wgmma_descriptor<1, 1024, 64>(desc_b_3, (&(((bfloat16_t*)V_ring)[0])));
          int condval_22;
          if (((r_1 % 2) == 0)) {
            condval_22 = ((int)blockIdx.x);
          } else {
            condval_22 = (131 - ((int)blockIdx.x));
          }
          tl::increase_descriptor_offset<int>(desc_b_3, ((((kb0_1 + 1) - ((((r_1 * 33) + (condval_22 >> 2)) & 255) >> 3)) & 1) * 32768));
          tl::warpgroup_fence_operand(reinterpret_cast<uint32_t*>(P_0 + 0), 32);
          tl::warpgroup_fence_operand(reinterpret_cast<float*>(acc_o_0 + 0), 64);
          tl::warpgroup_arrive();
          #pragma unroll
          for (int ki_3 = 0; ki_3 < 8; ++ki_3) {
            tl::wgmma_rs<tl::DataType::kBFloat16, tl::DataType::kBFloat16, tl::DataType::kFloat32, 64, 128, 16, false, true, 1, 1>(reinterpret_cast<const uint32_t*>(P_0 + (ki_3 * 8)), uint64_t(desc_b_3 + ((ki_3 * 2048) >> 4)), reinterpret_cast<uint32_t*>(acc_o_0 + 0), 1);
          }
          tl::warpgroup_commit_batch();
          tl::warpgroup_fence_operand(reinterpret_cast<float*>(acc_o_0 + 0), 64);
          tl::warpgroup_fence_operand(reinterpret_cast<uint32_t*>(P_0 + 0), 32);
        }
        tl::wait_wgmma<0>();
        tl::warpgroup_fence_operand(reinterpret_cast<float*>(acc_o_0 + 0), 64);
                int condval_23;
        if (((r_1 % 2) == 0)) {
          condval_23 = ((int)blockIdx.x);
        } else {
          condval_23 = (131 - ((int)blockIdx.x));
        }
        int condval_24;
        if (((r_1 % 2) == 0)) {
          condval_24 = ((int)blockIdx.x);
        } else {
          condval_24 = (131 - ((int)blockIdx.x));
        }
v_empty[(((kb0_1 + 1) - ((((r_1 * 33) + (condval_24 >> 2)) & 255) >> 3)) & 1)].arrive();
        #pragma unroll
        for (int i_16 = 0; i_16 < 32; ++i_16) {
          float2 __22;
            float2 v__24 = *(float2*)(acc_o_0 + (i_16 * 2));
            float2 v__25 = make_float2(row_sum_0[(i_16 & 1)], row_sum_0[(i_16 & 1)]);
            __22.x = (v__24.x/v__25.x);
            __22.y = (v__24.y/v__25.y);
          *(float2*)(acc_o_0 + (i_16 * 2)) = __22;
        }
        tl::__sync_thread_partial(3, 128);
        #pragma unroll
        for (int i_17 = 0; i_17 < 8; ++i_17) {
          tl::ptx_stmatrix_m8n8_x4((&(((bfloat16_t*)Q_0)[((((((((i_17 >> 2) * 4096) + ((((int)threadIdx.x) >> 5) * 1024)) + ((((int)threadIdx.x) & 15) * 64)) + (((((((int)threadIdx.x) & 7) >> 2) + ((i_17 & 3) >> 1)) & 1) * 32)) + (((((((int)threadIdx.x) & 3) >> 1) + (i_17 & 1)) & 1) * 16)) + (((((((int)threadIdx.x) & 31) >> 4) + (((int)threadIdx.x) & 1)) & 1) * 8)) - 4096)])), __pack_half2(((bfloat16_t)acc_o_0[(i_17 * 8)]), ((bfloat16_t)acc_o_0[((i_17 * 8) + 1)])), __pack_half2(((bfloat16_t)acc_o_0[((i_17 * 8) + 2)]), ((bfloat16_t)acc_o_0[((i_17 * 8) + 3)])), __pack_half2(((bfloat16_t)acc_o_0[((i_17 * 8) + 4)]), ((bfloat16_t)acc_o_0[((i_17 * 8) + 5)])), __pack_half2(((bfloat16_t)acc_o_0[((i_17 * 8) + 6)]), ((bfloat16_t)acc_o_0[((i_17 * 8) + 7)])));
        }
        tl::fence_proxy_async();
        tl::__sync_thread_partial(13, 128);
        if (tl::tl_shuffle_elect<128>()) {
          #pragma unroll
          for (int i_18 = 0; i_18 < 2; ++i_18) {
            int condval_25;
            if (((r_1 % 2) == 0)) {
              condval_25 = ((int)blockIdx.x);
            } else {
              condval_25 = (131 - ((int)blockIdx.x));
            }
            int condval_26;
            if (((r_1 % 2) == 0)) {
              condval_26 = ((int)blockIdx.x);
            } else {
              condval_26 = (131 - ((int)blockIdx.x));
            }
            int condval_27;
            if (((r_1 % 2) == 0)) {
              condval_27 = ((int)blockIdx.x);
            } else {
              condval_27 = (131 - ((int)blockIdx.x));
            }
            tl::tma_store(O_desc, (&(((bfloat16_t*)Q_0)[(i_18 * 4096)])), (i_18 * 64), (3968 - (((((r_1 * 33) + (condval_25 >> 2)) & 255) >> 3) * 128)), (((r_1 * 132) + condval_26) & 31), (((r_1 * 33) + (condval_27 >> 2)) >> 8));
          }
          tl::tma_store_arrive();
          tl::tma_store_wait<0, true>();
        }
        tl::__sync_thread_partial(13, 128);
        q_empty[0].arrive();
        int condval_28;
        if (((r_1 % 2) == 0)) {
          condval_28 = ((int)blockIdx.x);
        } else {
          condval_28 = (131 - ((int)blockIdx.x));
        }
        kv_done[0] = ((kb0_1 + 32) - ((((r_1 * 33) + (condval_28 >> 2)) & 255) >> 3));
      }
    } else {
      tl::warpgroup_reg_alloc<240>();
      for (int r_2 = 0; r_2 < ((((int)blockIdx.x) + 4096) / 132); ++r_2) {
        int kb0_2 = kv_done[0];
        #pragma unroll
        for (int i_19 = 0; i_19 < 16; ++i_19) {
          float broadcast_var_9 = 0x0p+0f/*0.000000e+00*/;
          *(float4*)(acc_o_1 + (i_19 * 4)) = make_float4(broadcast_var_9, broadcast_var_9, broadcast_var_9, broadcast_var_9);
        }
        float broadcast_var_10 = 0x0p+0f/*0.000000e+00*/;
        *(float2*)(row_sum_1 + 0) = make_float2(broadcast_var_10, broadcast_var_10);
        float broadcast_var_11 = -CUDART_INF_F;
        *(float2*)(row_max_1 + 0) = make_float2(broadcast_var_11, broadcast_var_11);
        q_full[1].wait((r_2 & 1));
        k_full[(kb0_2 & 1)].wait(((kb0_2 & 3) >> 1));
        tl::__sync_thread_partial(14, 256);
        {
          tl::GmmaDescriptor desc_a_2;
          tl::GmmaDescriptor desc_b_4;
          tl::initialize_wgmma_descriptor<1, 1, 64>(desc_a_2, (&(((bfloat16_t*)Q_1)[0])));
          tl::initialize_wgmma_descriptor<1, 1, 64>(desc_b_4, (&(((bfloat16_t*)K_ring)[0])));
          tl::increase_descriptor_offset<int>(desc_b_4, ((kb0_2 & 1) * 32768));
          tl::warpgroup_fence_operand(reinterpret_cast<float*>(S_1 + 0), 64);
          tl::warpgroup_arrive();
          #pragma unroll
          for (int ki_4 = 0; ki_4 < 8; ++ki_4) {
            tl::wgmma_ss<tl::DataType::kBFloat16, tl::DataType::kBFloat16, tl::DataType::kFloat32, 64, 128, 16, false, false, 1, 1>(uint64_t(desc_a_2 + ((((ki_4 >> 2) * 8192) + ((ki_4 & 3) * 32)) >> 4)), uint64_t(desc_b_4 + ((((ki_4 >> 2) * 16384) + ((ki_4 & 3) * 32)) >> 4)), ((uint32_t*)(S_1 + 0)), ((0 < ki_4) ? 1 : 0));
          }
          tl::warpgroup_commit_batch();
          tl::warpgroup_fence_operand(reinterpret_cast<float*>(S_1 + 0), 64);
        }
        tl::__named_barrier_arrive(15, 256);
        tl::wait_wgmma<0>();
        tl::warpgroup_fence_operand(reinterpret_cast<float*>(S_1 + 0), 64);
        k_empty[(kb0_2 & 1)].arrive();
        int condval_29;
        if (((r_2 % 2) == 0)) {
          condval_29 = ((int)blockIdx.x);
        } else {
          condval_29 = (131 - ((int)blockIdx.x));
        }
        if (991 < (((r_2 * 132) + condval_29) & 1023)) {
          #pragma unroll
          for (int i_20 = 0; i_20 < 64; ++i_20) {
            float condval_30;
            if (((((((i_20 >> 2) * 8) + ((((int)threadIdx.x) & 3) * 2)) + (i_20 & 1)) + 64) <= ((((((int)threadIdx.x) >> 5) * 16) + (((i_20 & 3) >> 1) * 8)) + ((((int)threadIdx.x) & 31) >> 2)))) {
              condval_30 = S_1[i_20];
            } else {
              condval_30 = -CUDART_INF_F;
            }
            S_1[i_20] = condval_30;
          }
        }
        *(float2*)(prev_max_1 + 0) = *(float2*)(row_max_1 + 0);
        #pragma unroll
        for (int i_21 = 0; i_21 < 2; ++i_21) {
          row_max_1_clear[i_21] = -CUDART_INF_F;
          #pragma unroll
          for (int rv_4 = 0; rv_4 < 32; ++rv_4) {
            row_max_1_clear[i_21] = max(row_max_1_clear[i_21], S_1[((((rv_4 & 15) * 4) + (i_21 * 2)) + (rv_4 >> 4))]);
          }
          row_max_1_clear[i_21] = tl::AllReduce<tl::MaxOp, 4, 1, 256, tl::NamedBarrier<128>>::run(row_max_1_clear[i_21]);
          row_max_1[i_21] = max(row_max_1[i_21], row_max_1_clear[i_21]);
        }
        float broadcast_var_12 = 0x1.0527dbd87e24dp-3f/*1.275174e-01*/;
        float broadcast_var_13 = 0x1.0527dbd87e24dp-3f/*1.275174e-01*/;
        float2 __23;
        float2 __24;
          float2 __25;
            float2 v__26 = *(float2*)(prev_max_1 + 0);
            float2 v__27 = make_float2(broadcast_var_12, broadcast_var_12);
            __25.x = (v__26.x*v__27.x);
            __25.y = (v__26.y*v__27.y);
          float2 __26;
            float2 v__28 = *(float2*)(row_max_1 + 0);
            float2 v__29 = make_float2(broadcast_var_13, broadcast_var_13);
            __26.x = (v__28.x*v__29.x);
            __26.y = (v__28.y*v__29.y);
          __24.x = (__25.x-__26.x);
          __24.y = (__25.y-__26.y);
        __23.x = exp2f(__24.x);
        __23.y = exp2f(__24.y);
        *(float2*)(rescale_1 + 0) = __23;
        #pragma unroll
        for (int i_22 = 0; i_22 < 32; ++i_22) {
          float broadcast_var_14 = 0x1.0527dbd87e24dp-3f/*1.275174e-01*/;
          float2 __27;
          float2 __28;
            float2 __29;
              float2 v__30 = *(float2*)(S_1 + (i_22 * 2));
              float2 v__31 = make_float2(broadcast_var_14, broadcast_var_14);
              __29.x = (v__30.x*v__31.x);
              __29.y = (v__30.y*v__31.y);
            float2 v__32 = make_float2((row_max_1[(i_22 & 1)] * 0x1.0527dbd87e24dp-3f/*1.275174e-01*/), (row_max_1[(i_22 & 1)] * 0x1.0527dbd87e24dp-3f/*1.275174e-01*/));
            __28.x = (__29.x-v__32.x);
            __28.y = (__29.y-v__32.y);
          __27.x = exp2f(__28.x);
          __27.y = exp2f(__28.y);
          *(float2*)(S_1 + (i_22 * 2)) = __27;
        }
        #pragma unroll
        for (int i_23 = 0; i_23 < 2; ++i_23) {
          block_sum_1[i_23] = 0x0p+0f/*0.000000e+00*/;
          #pragma unroll
          for (int rv_5 = 0; rv_5 < 32; ++rv_5) {
            block_sum_1[i_23] = (block_sum_1[i_23] + S_1[((((rv_5 & 15) * 4) + (i_23 * 2)) + (rv_5 >> 4))]);
          }
          block_sum_1[i_23] = tl::AllReduce<tl::SumOp, 4, 1, 256, tl::NamedBarrier<128>>::run(block_sum_1[i_23]);
        }
        float2 __30;
          float2 __31;
            float2 v__33 = *(float2*)(row_sum_1 + 0);
            float2 v__34 = *(float2*)(rescale_1 + 0);
            __31.x = (v__33.x*v__34.x);
            __31.y = (v__33.y*v__34.y);
          float2 v__35 = *(float2*)(block_sum_1 + 0);
          __30.x = (__31.x+v__35.x);
          __30.y = (__31.y+v__35.y);
        *(float2*)(row_sum_1 + 0) = __30;
        #pragma unroll
        for (int i_24 = 0; i_24 < 16; ++i_24) {
          uint2 __32;
          float4 v__36 = *(float4*)(S_1 + (i_24 * 4));
          (reinterpret_cast<__nv_bfloat162*>(&__32))[0] = __float22bfloat162_rn(((float2*)(&v__36))[0]);
          (reinterpret_cast<__nv_bfloat162*>(&__32))[1] = __float22bfloat162_rn(((float2*)(&v__36))[1]);
          *(uint2*)(P_1 + (i_24 * 4)) = __32;
        }
        int condval_31;
        if (((r_2 % 2) == 0)) {
          condval_31 = ((int)blockIdx.x);
        } else {
          condval_31 = (131 - ((int)blockIdx.x));
        }
        for (int kb_2 = 1; kb_2 < (32 - ((((r_2 * 33) + (condval_31 >> 2)) & 255) >> 3)); ++kb_2) {
          k_full[((kb0_2 + kb_2) & 1)].wait((((kb0_2 + kb_2) & 3) >> 1));
          tl::__sync_thread_partial(14, 256);
          {
            tl::GmmaDescriptor desc_a_3;
            tl::GmmaDescriptor desc_b_5;
            tl::initialize_wgmma_descriptor<1, 1, 64>(desc_a_3, (&(((bfloat16_t*)Q_1)[0])));
            tl::initialize_wgmma_descriptor<1, 1, 64>(desc_b_5, (&(((bfloat16_t*)K_ring)[0])));
            tl::increase_descriptor_offset<int>(desc_b_5, (((kb0_2 + kb_2) & 1) * 32768));
            tl::warpgroup_fence_operand(reinterpret_cast<float*>(S_1 + 0), 64);
            tl::warpgroup_arrive();
            #pragma unroll
            for (int ki_5 = 0; ki_5 < 8; ++ki_5) {
              tl::wgmma_ss<tl::DataType::kBFloat16, tl::DataType::kBFloat16, tl::DataType::kFloat32, 64, 128, 16, false, false, 1, 1>(uint64_t(desc_a_3 + ((((ki_5 >> 2) * 8192) + ((ki_5 & 3) * 32)) >> 4)), uint64_t(desc_b_5 + ((((ki_5 >> 2) * 16384) + ((ki_5 & 3) * 32)) >> 4)), ((uint32_t*)(S_1 + 0)), ((0 < ki_5) ? 1 : 0));
            }
            tl::warpgroup_commit_batch();
            tl::warpgroup_fence_operand(reinterpret_cast<float*>(S_1 + 0), 64);
          }
          v_full[(((kb0_2 + kb_2) + 1) & 1)].wait(((((kb0_2 + kb_2) + 3) & 3) >> 1));
          {
            tl::GmmaDescriptor desc_b_6;
            tl::initialize_wgmma_descriptor<1, 1024, 64>(desc_b_6, (&(((bfloat16_t*)V_ring)[0])));
            tl::increase_descriptor_offset<int>(desc_b_6, ((((kb0_2 + kb_2) + 1) & 1) * 32768));
            tl::warpgroup_fence_operand(reinterpret_cast<uint32_t*>(P_1 + 0), 32);
            tl::warpgroup_fence_operand(reinterpret_cast<float*>(acc_o_1 + 0), 64);
            tl::warpgroup_arrive();
            #pragma unroll
            for (int ki_6 = 0; ki_6 < 8; ++ki_6) {
              tl::wgmma_rs<tl::DataType::kBFloat16, tl::DataType::kBFloat16, tl::DataType::kFloat32, 64, 128, 16, false, true, 1, 1>(reinterpret_cast<const uint32_t*>(P_1 + (ki_6 * 8)), uint64_t(desc_b_6 + ((ki_6 * 2048) >> 4)), reinterpret_cast<uint32_t*>(acc_o_1 + 0), 1);
            }
            tl::warpgroup_commit_batch();
            tl::warpgroup_fence_operand(reinterpret_cast<float*>(acc_o_1 + 0), 64);
            tl::warpgroup_fence_operand(reinterpret_cast<uint32_t*>(P_1 + 0), 32);
          }
          tl::__named_barrier_arrive(15, 256);
          tl::wait_wgmma<1>();
          tl::warpgroup_fence_operand(reinterpret_cast<float*>(S_1 + 0), 64);
          k_empty[((kb0_2 + kb_2) & 1)].arrive();
          int condval_32;
          if (((r_2 % 2) == 0)) {
            condval_32 = ((int)blockIdx.x);
          } else {
            condval_32 = (131 - ((int)blockIdx.x));
          }
          if (((61 - (((((r_2 * 33) + (condval_32 >> 2)) & 255) >> 3) * 2)) - (kb_2 * 2)) < 0) {
            #pragma unroll
            for (int i_25 = 0; i_25 < 64; ++i_25) {
              int condval_34;
              if (((r_2 % 2) == 0)) {
                condval_34 = ((int)blockIdx.x);
              } else {
                condval_34 = (131 - ((int)blockIdx.x));
              }
              float condval_33;
              if ((((((kb_2 * 128) + ((i_25 >> 2) * 8)) + ((((int)threadIdx.x) & 3) * 2)) + (i_25 & 1)) <= ((((((((int)threadIdx.x) >> 5) * 16) + (((i_25 & 3) >> 1) * 8)) + ((((int)threadIdx.x) & 31) >> 2)) + 3904) - (((((r_2 * 33) + (condval_34 >> 2)) & 255) >> 3) * 128)))) {
                condval_33 = S_1[i_25];
              } else {
                condval_33 = -CUDART_INF_F;
              }
              S_1[i_25] = condval_33;
            }
          }
          *(float2*)(prev_max_1 + 0) = *(float2*)(row_max_1 + 0);
          #pragma unroll
          for (int i_26 = 0; i_26 < 2; ++i_26) {
            row_max_1_clear_1[i_26] = -CUDART_INF_F;
            #pragma unroll
            for (int rv_6 = 0; rv_6 < 32; ++rv_6) {
              row_max_1_clear_1[i_26] = max(row_max_1_clear_1[i_26], S_1[((((rv_6 & 15) * 4) + (i_26 * 2)) + (rv_6 >> 4))]);
            }
            row_max_1_clear_1[i_26] = tl::AllReduce<tl::MaxOp, 4, 1, 256, tl::NamedBarrier<128>>::run(row_max_1_clear_1[i_26]);
            row_max_1[i_26] = max(row_max_1[i_26], row_max_1_clear_1[i_26]);
          }
          float broadcast_var_15 = 0x1.0527dbd87e24dp-3f/*1.275174e-01*/;
          float broadcast_var_16 = 0x1.0527dbd87e24dp-3f/*1.275174e-01*/;
          float2 __33;
          float2 __34;
            float2 __35;
              float2 v__37 = *(float2*)(prev_max_1 + 0);
              float2 v__38 = make_float2(broadcast_var_15, broadcast_var_15);
              __35.x = (v__37.x*v__38.x);
              __35.y = (v__37.y*v__38.y);
            float2 __36;
              float2 v__39 = *(float2*)(row_max_1 + 0);
              float2 v__40 = make_float2(broadcast_var_16, broadcast_var_16);
              __36.x = (v__39.x*v__40.x);
              __36.y = (v__39.y*v__40.y);
            __34.x = (__35.x-__36.x);
            __34.y = (__35.y-__36.y);
          __33.x = exp2f(__34.x);
          __33.y = exp2f(__34.y);
          *(float2*)(rescale_1 + 0) = __33;
          #pragma unroll
          for (int i_27 = 0; i_27 < 32; ++i_27) {
            float broadcast_var_17 = 0x1.0527dbd87e24dp-3f/*1.275174e-01*/;
            float2 __37;
            float2 __38;
              float2 __39;
                float2 v__41 = *(float2*)(S_1 + (i_27 * 2));
                float2 v__42 = make_float2(broadcast_var_17, broadcast_var_17);
                __39.x = (v__41.x*v__42.x);
                __39.y = (v__41.y*v__42.y);
              float2 v__43 = make_float2((row_max_1[(i_27 & 1)] * 0x1.0527dbd87e24dp-3f/*1.275174e-01*/), (row_max_1[(i_27 & 1)] * 0x1.0527dbd87e24dp-3f/*1.275174e-01*/));
              __38.x = (__39.x-v__43.x);
              __38.y = (__39.y-v__43.y);
            __37.x = exp2f(__38.x);
            __37.y = exp2f(__38.y);
            *(float2*)(S_1 + (i_27 * 2)) = __37;
          }
          #pragma unroll
          for (int i_28 = 0; i_28 < 2; ++i_28) {
            block_sum_1[i_28] = 0x0p+0f/*0.000000e+00*/;
            #pragma unroll
            for (int rv_7 = 0; rv_7 < 32; ++rv_7) {
              block_sum_1[i_28] = (block_sum_1[i_28] + S_1[((((rv_7 & 15) * 4) + (i_28 * 2)) + (rv_7 >> 4))]);
            }
            block_sum_1[i_28] = tl::AllReduce<tl::SumOp, 4, 1, 256, tl::NamedBarrier<128>>::run(block_sum_1[i_28]);
          }
          float2 __40;
            float2 __41;
              float2 v__44 = *(float2*)(row_sum_1 + 0);
              float2 v__45 = *(float2*)(rescale_1 + 0);
              __41.x = (v__44.x*v__45.x);
              __41.y = (v__44.y*v__45.y);
            float2 v__46 = *(float2*)(block_sum_1 + 0);
            __40.x = (__41.x+v__46.x);
            __40.y = (__41.y+v__46.y);
          *(float2*)(row_sum_1 + 0) = __40;
          tl::wait_wgmma<0>();
          tl::warpgroup_fence_operand(reinterpret_cast<float*>(acc_o_1 + 0), 64);
          v_empty[(((kb0_2 + kb_2) + 1) & 1)].arrive();
          #pragma unroll
          for (int i_29 = 0; i_29 < 16; ++i_29) {
            uint2 __42;
            float4 v__47 = *(float4*)(S_1 + (i_29 * 4));
            (reinterpret_cast<__nv_bfloat162*>(&__42))[0] = __float22bfloat162_rn(((float2*)(&v__47))[0]);
            (reinterpret_cast<__nv_bfloat162*>(&__42))[1] = __float22bfloat162_rn(((float2*)(&v__47))[1]);
            *(uint2*)(P_1 + (i_29 * 4)) = __42;
          }
          #pragma unroll
          for (int i_30 = 0; i_30 < 32; ++i_30) {
            float2 __43;
              float2 v__48 = *(float2*)(acc_o_1 + (i_30 * 2));
              float2 v__49 = make_float2(rescale_1[(i_30 & 1)], rescale_1[(i_30 & 1)]);
              __43.x = (v__48.x*v__49.x);
              __43.y = (v__48.y*v__49.y);
            *(float2*)(acc_o_1 + (i_30 * 2)) = __43;
          }
        }
                int condval_35;
        if (((r_2 % 2) == 0)) {
          condval_35 = ((int)blockIdx.x);
        } else {
          condval_35 = (131 - ((int)blockIdx.x));
        }
        int condval_36;
        if (((r_2 % 2) == 0)) {
          condval_36 = ((int)blockIdx.x);
        } else {
          condval_36 = (131 - ((int)blockIdx.x));
        }
        int condval_37;
        if (((r_2 % 2) == 0)) {
          condval_37 = ((int)blockIdx.x);
        } else {
          condval_37 = (131 - ((int)blockIdx.x));
        }
v_full[(((kb0_2 + 1) - ((((r_2 * 33) + (condval_36 >> 2)) & 255) >> 3)) & 1)].wait(((((kb0_2 + 3) - ((((r_2 * 33) + (condval_37 >> 2)) & 255) >> 3)) & 3) >> 1));
        {
          tl::GmmaDescriptor desc_b_7;
          tl::initialize_wgmma_descriptor<1, 1024, 64>(desc_b_7, (&(((bfloat16_t*)V_ring)[0])));
          int condval_38;
          if (((r_2 % 2) == 0)) {
            condval_38 = ((int)blockIdx.x);
          } else {
            condval_38 = (131 - ((int)blockIdx.x));
          }
          tl::increase_descriptor_offset<int>(desc_b_7, ((((kb0_2 + 1) - ((((r_2 * 33) + (condval_38 >> 2)) & 255) >> 3)) & 1) * 32768));
          tl::warpgroup_fence_operand(reinterpret_cast<uint32_t*>(P_1 + 0), 32);
          tl::warpgroup_fence_operand(reinterpret_cast<float*>(acc_o_1 + 0), 64);
          tl::warpgroup_arrive();
          #pragma unroll
          for (int ki_7 = 0; ki_7 < 8; ++ki_7) {
            tl::wgmma_rs<tl::DataType::kBFloat16, tl::DataType::kBFloat16, tl::DataType::kFloat32, 64, 128, 16, false, true, 1, 1>(reinterpret_cast<const uint32_t*>(P_1 + (ki_7 * 8)), uint64_t(desc_b_7 + ((ki_7 * 2048) >> 4)), reinterpret_cast<uint32_t*>(acc_o_1 + 0), 1);
          }
          tl::warpgroup_commit_batch();
          tl::warpgroup_fence_operand(reinterpret_cast<float*>(acc_o_1 + 0), 64);
          tl::warpgroup_fence_operand(reinterpret_cast<uint32_t*>(P_1 + 0), 32);
        }
        tl::wait_wgmma<0>();
        tl::warpgroup_fence_operand(reinterpret_cast<float*>(acc_o_1 + 0), 64);
                int condval_39;
        if (((r_2 % 2) == 0)) {
          condval_39 = ((int)blockIdx.x);
        } else {
          condval_39 = (131 - ((int)blockIdx.x));
        }
        int condval_40;
        if (((r_2 % 2) == 0)) {
          condval_40 = ((int)blockIdx.x);
        } else {
          condval_40 = (131 - ((int)blockIdx.x));
        }
v_empty[(((kb0_2 + 1) - ((((r_2 * 33) + (condval_40 >> 2)) & 255) >> 3)) & 1)].arrive();
        #pragma unroll
        for (int i_31 = 0; i_31 < 32; ++i_31) {
          float2 __44;
            float2 v__50 = *(float2*)(acc_o_1 + (i_31 * 2));
            float2 v__51 = make_float2(row_sum_1[(i_31 & 1)], row_sum_1[(i_31 & 1)]);
            __44.x = (v__50.x/v__51.x);
            __44.y = (v__50.y/v__51.y);
          *(float2*)(acc_o_1 + (i_31 * 2)) = __44;
        }
        tl::__sync_thread_partial(4, 128);
        #pragma unroll
        for (int i_32 = 0; i_32 < 8; ++i_32) {
          tl::ptx_stmatrix_m8n8_x4((&(((bfloat16_t*)Q_1)[((((((((i_32 >> 2) * 4096) + ((((int)threadIdx.x) >> 5) * 1024)) + ((((int)threadIdx.x) & 15) * 64)) + (((((((int)threadIdx.x) & 7) >> 2) + ((i_32 & 3) >> 1)) & 1) * 32)) + (((((((int)threadIdx.x) & 3) >> 1) + (i_32 & 1)) & 1) * 16)) + (((((((int)threadIdx.x) & 31) >> 4) + (((int)threadIdx.x) & 1)) & 1) * 8)) - 8192)])), __pack_half2(((bfloat16_t)acc_o_1[(i_32 * 8)]), ((bfloat16_t)acc_o_1[((i_32 * 8) + 1)])), __pack_half2(((bfloat16_t)acc_o_1[((i_32 * 8) + 2)]), ((bfloat16_t)acc_o_1[((i_32 * 8) + 3)])), __pack_half2(((bfloat16_t)acc_o_1[((i_32 * 8) + 4)]), ((bfloat16_t)acc_o_1[((i_32 * 8) + 5)])), __pack_half2(((bfloat16_t)acc_o_1[((i_32 * 8) + 6)]), ((bfloat16_t)acc_o_1[((i_32 * 8) + 7)])));
        }
        tl::fence_proxy_async();
        tl::__sync_thread_partial(12, 128);
        if (tl::tl_shuffle_elect<128>()) {
          #pragma unroll
          for (int i_33 = 0; i_33 < 2; ++i_33) {
            int condval_41;
            if (((r_2 % 2) == 0)) {
              condval_41 = ((int)blockIdx.x);
            } else {
              condval_41 = (131 - ((int)blockIdx.x));
            }
            int condval_42;
            if (((r_2 % 2) == 0)) {
              condval_42 = ((int)blockIdx.x);
            } else {
              condval_42 = (131 - ((int)blockIdx.x));
            }
            int condval_43;
            if (((r_2 % 2) == 0)) {
              condval_43 = ((int)blockIdx.x);
            } else {
              condval_43 = (131 - ((int)blockIdx.x));
            }
            tl::tma_store(O_desc, (&(((bfloat16_t*)Q_1)[(i_33 * 4096)])), (i_33 * 64), (4032 - (((((r_2 * 33) + (condval_41 >> 2)) & 255) >> 3) * 128)), (((r_2 * 132) + condval_42) & 31), (((r_2 * 33) + (condval_43 >> 2)) >> 8));
          }
          tl::tma_store_arrive();
          tl::tma_store_wait<0, true>();
        }
        tl::__sync_thread_partial(12, 128);
        q_empty[1].arrive();
        int condval_44;
        if (((r_2 % 2) == 0)) {
          condval_44 = ((int)blockIdx.x);
        } else {
          condval_44 = (131 - ((int)blockIdx.x));
        }
        kv_done[0] = ((kb0_2 + 32) - ((((r_2 * 33) + (condval_44 >> 2)) & 255) >> 3));
      }
    }
  }
}

