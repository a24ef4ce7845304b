// sfu_sweep.cuh: kernels that evaluate one PTX instruction on f32 bit patterns (probe_sfu.cu, probe_sfu_trig.cu).
//
// Sweep kernels take no input array: element i evaluates the instruction on the bit pattern start + i, so
// all 2^32 inputs can be covered in a few launches without host traffic. Array kernels take explicit inputs
// (bit patterns in, bit patterns out).
#pragma once

#define SWEEP(NAME, PTX)                                                                            \
    extern "C" __global__ void NAME(unsigned int start, unsigned int* __restrict__ out,            \
                                    unsigned long long n) {                                        \
        unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;           \
        if (i >= n) return;                                                                         \
        unsigned int x = start + (unsigned int)i, r;                                                \
        asm volatile(PTX " %0, %1;" : "=r"(r) : "r"(x));                                           \
        out[i] = r;                                                                                 \
    }

#define ARRAY(NAME, PTX)                                                                            \
    extern "C" __global__ void NAME(const unsigned int* __restrict__ x, unsigned int* __restrict__ out, \
                                    unsigned long long n) {                                        \
        unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;           \
        if (i >= n) return;                                                                         \
        unsigned int r;                                                                             \
        asm volatile(PTX " %0, %1;" : "=r"(r) : "r"(x[i]));                                        \
        out[i] = r;                                                                                 \
    }
