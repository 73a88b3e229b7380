/*
 * cuda.h - the CUDA backend (train/cuda/): the table of backend.h filled
 * with device pointers. bf16 AMP-O2 by default in shardtrain, or fp32 with
 * TF32 off, or tf32: fp32 results are checked against the CPU backend
 * (tests/gpu/backend_gpu.c), bf16 ones against its bf16 emulation
 * (tests/gpu/train_gpu.sh).
 *
 * cuda.c holds memory, the stream, cuBLASLt (GEMMs and attention's batched
 * GEMMs) and cuDNN (convolutions); the kernel families of kernels.h,
 * attention.cu and nhwc.cu hold every other kernel (common.cuh: shared).
 * All work is queued on one compute stream; sync() waits for it, and
 * to_host() waits for what came before it. Memory comes from CUDA's
 * stream-ordered pool, which keeps what is freed: the model allocates its
 * arenas once (model_alloc), and FSDP's per-step blocks are reused from
 * the pool without a cudaMalloc or a device-wide wait.
 */
#ifndef SK_TRAIN_CUDA_H
#define SK_TRAIN_CUDA_H

#include <stddef.h>

#include "../backend.h"

/*
 * Open the CUDA backend on GPU device (the rank's node-local rank, modulo
 * the count). CUDA_TF32 lets the GEMMs and convolutions round their fp32
 * inputs to TF32 on the tensor cores (PyTorch's allow_tf32); the data
 * stay fp32. CUDA_BF16 stores activations in bf16 and runs the GEMMs and
 * convolutions on bf16 tensor cores with fp32 accumulation. With
 * deterministic set, only algorithms cuDNN marks deterministic are used
 * and each is the first of cuDNN's heuristics (the same bits run to run);
 * else each convolution's algorithm is the fastest of cuDNN's timed
 * trials for its shape. Returns the table, or NULL with a message in err when
 * the build has no CUDA, no GPU is visible, or a library fails to start.
 * Calling it again returns the same table.
 */
enum cuda_precision {
	CUDA_FP32,		/* fp32, TF32 off */
	CUDA_TF32,		/* fp32 data, TF32 tensor-core math */
	CUDA_BF16		/* bf16 AMP-O2 (backend.h, act_elt 2) */
};
const struct backend *backend_cuda(int device, enum cuda_precision prec,
    int deterministic, char *err, size_t errlen);

/* Nonzero when a CUDA device is usable (for the tests' exit 77). */
int cuda_device_count(void);

/* The compute stream (a cudaStream_t), for comm_nccl.c and the loader's
 * hand-off; NULL before backend_cuda(). */
void *cuda_stream(void);

/* The device's name ("NVIDIA H100 80GB HBM3"), and the most memory the
 * backend has held at once, in bytes: its allocations at their high water
 * mark plus its fixed workspaces (PyTorch's max_memory_allocated, not the
 * CUDA context or the libraries' own). */
const char *cuda_device_name(void);
size_t cuda_peak_bytes(void);

/* The GPU the backend runs on, or -1 before backend_cuda(). */
int cuda_device(void);

/* Wait, on the host and on the compute stream, for a cudaEvent_t another
 * stream recorded (the loader's copy of a batch). */
void cuda_wait_event(void *ev);

/* Page-locked host memory for the batches copied to the GPU, or NULL (no
 * CUDA, or none to be had: use malloc then). */
void *cuda_host_alloc(size_t bytes);
void cuda_host_free(void *p);

/* NCCL's stream: memory freed from now on goes back to the pool only once
 * that stream, too, has reached the free (comm_nccl.c). */
void cuda_set_comm_stream(void *stream);

#endif /* SK_TRAIN_CUDA_H */
