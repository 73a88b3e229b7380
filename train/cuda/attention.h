/*
 * attention.h - the launchers of attention.cu: the bf16 attention's moves
 * between token-major rows and head-major blocks. bf16 pointers (device),
 * stream a cudaStream_t; nothing is launched for an empty tensor.
 */
#ifndef SK_TRAIN_CUDA_ATTENTION_H
#define SK_TRAIN_CUDA_ATTENTION_H

#ifdef __cplusplus
extern "C" {
#endif

/* dst (parts,B,NH,T,C/NH) = src (B,T,parts C): q, k, v (parts 3) or a
 * gradient of out (parts 1), head by head */
void cuk_heads_split(void *dst, const void *src, int B, int T, int C,
    int NH, int parts, void *stream);
/* dst (B,T,parts C) = src (parts,B,NH,T,C/NH), or += with acc (rounded
 * once, after the add) */
void cuk_heads_merge(void *dst, const void *src, int B, int T, int C,
    int NH, int parts, int acc, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* SK_TRAIN_CUDA_ATTENTION_H */
