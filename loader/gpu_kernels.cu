/*
 * gpu_kernels.cu - the loader's kernel: uint8 HWC batches to normalized
 * f32, bf16 or f16 in NHWC or NCHW, run on the device after the copy
 * (DESIGN "Fast paths": the host ships uint8, a quarter of the f32 bytes).
 * The kernels come first, then their launcher; the host logic that calls
 * it is in loader/gpu.c.
 */
#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "gpu_kernels.h"

// ----------------------------------------------------------------------------
// kernels

struct norm_args {
	float mean[3], std[3];
};

// The CPU path's formula, op for op: ((float)v / 255.0f - mean) / std, each
// step one IEEE single operation rounded to nearest. The _rn intrinsics are
// never contracted into an FMA or approximated, whatever -use_fast_math,
// -fmad or -prec-div say, so f32 results are bit-identical to the CPU's.
__device__ __forceinline__ float normalize(uint8_t v, float mean, float std)
{
	return __fdiv_rn(__fsub_rn(__fdiv_rn((float)v, 255.0f), mean), std);
}

// One output value of type T for channel value v.
template <typename T> struct out_value;

template <> struct out_value<float> {
	static __device__ __forceinline__ float of(uint8_t v, float m, float s)
	{
		return normalize(v, m, s);
	}
};

// bf16 and f16: the float above, rounded once to nearest even.
template <> struct out_value<__nv_bfloat16> {
	static __device__ __forceinline__ __nv_bfloat16 of(uint8_t v, float m,
	    float s)
	{
		return __float2bfloat16_rn(normalize(v, m, s));
	}
};

template <> struct out_value<__half> {
	static __device__ __forceinline__ __half of(uint8_t v, float m, float s)
	{
		return __float2half_rn(normalize(v, m, s));
	}
};

// u8 output: no normalization (the CPU path ignores mean and std for u8),
// only the layout change.
template <> struct out_value<uint8_t> {
	static __device__ __forceinline__ uint8_t of(uint8_t v, float, float)
	{
		return v;
	}
};

// inp (n,S,S,3) u8 -> out (n,S,S,3) if !NCHW, else (n,3,S,S); hw = S*S.
// One thread per pixel: blockIdx.x * blockDim.x + threadIdx.x is the pixel
// within an image, blockIdx.y walks the images (with a stride, since
// gridDim.y stops at 65535).
template <typename T, bool NCHW>
__global__ void convert_kernel(T *out, const uint8_t *inp, int n, int hw,
    norm_args nm)
{
	int p = blockIdx.x * blockDim.x + threadIdx.x;

	if (p >= hw)
		return;
	for (int i = blockIdx.y; i < n; i += gridDim.y) {
		const uint8_t *px = inp + ((size_t)i * hw + p) * 3;
		T *o = out + (size_t)i * hw * 3;
		uint8_t r = px[0], g = px[1], b = px[2];

		if (NCHW) {
			// each channel plane is written coalesced
			o[p] = out_value<T>::of(r, nm.mean[0], nm.std[0]);
			o[(size_t)hw + p] =
			    out_value<T>::of(g, nm.mean[1], nm.std[1]);
			o[2 * (size_t)hw + p] =
			    out_value<T>::of(b, nm.mean[2], nm.std[2]);
		} else {
			size_t q = (size_t)p * 3;

			o[q] = out_value<T>::of(r, nm.mean[0], nm.std[0]);
			o[q + 1] = out_value<T>::of(g, nm.mean[1], nm.std[1]);
			o[q + 2] = out_value<T>::of(b, nm.mean[2], nm.std[2]);
		}
	}
}

// ----------------------------------------------------------------------------
// launcher

template <typename T>
static void launch(void *out, const uint8_t *inp, int n, int hw,
    enum sk_layout layout, const norm_args &nm, cudaStream_t stream)
{
	const int block = 256;
	dim3 grid((hw + block - 1) / block, n < 65535 ? n : 65535);

	if (layout == SK_LAYOUT_NCHW)
		convert_kernel<T, true><<<grid, block, 0, stream>>>(
		    (T *)out, inp, n, hw, nm);
	else
		convert_kernel<T, false><<<grid, block, 0, stream>>>(
		    (T *)out, inp, n, hw, nm);
}

extern "C" cudaError_t
sk__gpu_convert_launch(void *out, const void *inp, int n, int size,
    enum sk_dtype dtype, enum sk_layout layout, const float mean[3],
    const float std[3], cudaStream_t stream)
{
	const uint8_t *in = (const uint8_t *)inp;
	norm_args nm;
	int hw;

	// hw and the pixel index are ints: S*S must stay below 2^31
	if (n < 0 || size <= 0 || size > 46340)
		return cudaErrorInvalidValue;
	if (n == 0)
		return cudaSuccess;
	hw = size * size;
	for (int c = 0; c < 3; c++) {
		nm.mean[c] = mean[c];
		nm.std[c] = std[c];
	}
	switch (dtype) {
	case SK_DTYPE_U8:
		launch<uint8_t>(out, in, n, hw, layout, nm, stream);
		break;
	case SK_DTYPE_F32:
		launch<float>(out, in, n, hw, layout, nm, stream);
		break;
	case SK_DTYPE_BF16:
		launch<__nv_bfloat16>(out, in, n, hw, layout, nm, stream);
		break;
	case SK_DTYPE_F16:
		launch<__half>(out, in, n, hw, layout, nm, stream);
		break;
	default:
		return cudaErrorInvalidValue;
	}
	return cudaGetLastError();
}
