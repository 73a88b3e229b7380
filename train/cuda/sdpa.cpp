/*
 * sdpa.cu - flash attention through cuDNN's fused SDPA (sdpa.h). The one
 * C++ unit of the backend: cudnn-frontend is a C++ header library. Built
 * without it (configure found no cudnn_frontend.h), every call returns -1
 * and the bf16 path keeps its math attention.
 *
 * The graphs: forward q, k, v -> o and the softmax statistics; backward
 * q, k, v, o, do, stats -> dq, dk, dv. Every tensor is (B,NH,T,hd) by its
 * strides into the model's token-major rows: q, k, v and their gradients
 * (B,T,3C), o and do (B,T,C). bf16 in and out, fp32 inside and in the
 * statistics. A plan is built once per (B, T, C, NH, direction,
 * determinism) and kept for the process; the heuristics' first engine
 * (cuDNN's mode A), so a shape gets the same engine every run.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>

#include "kernels.h"
#include "sdpa.h"

#ifdef HAVE_CUDNN_FRONTEND

#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>

#include <cudnn_frontend.h>

namespace fe = cudnn_frontend;

namespace {

enum : int64_t {
	U_Q = 1, U_K, U_V, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV
};

struct plan {
	std::shared_ptr<fe::graph::Graph> g;	/* NULL: not supported */
	int64_t ws;				/* workspace bytes */
};

/* B, T, C, NH, backward, deterministic */
typedef std::tuple<int, int, int, int, int, int> plan_key;

std::map<plan_key, plan> plans;
bool said;

/* (B,NH,T,hd) by strides into rows of row elements, head h at h hd */
std::shared_ptr<fe::graph::Tensor_attributes>
heads(fe::graph::Graph &g, const char *name, int64_t uid, int64_t B,
    int64_t NH, int64_t T, int64_t hd, int64_t row)
{
	return g.tensor(fe::graph::Tensor_attributes().set_name(name)
	    .set_uid(uid).set_dim({ B, NH, T, hd })
	    .set_stride({ T * row, hd, row, 1 }));
}

void
out_heads(const std::shared_ptr<fe::graph::Tensor_attributes> &t,
    int64_t uid, int64_t B, int64_t NH, int64_t T, int64_t hd, int64_t row)
{
	t->set_output(true).set_uid(uid).set_dim({ B, NH, T, hd })
	    .set_stride({ T * row, hd, row, 1 });
}

/* validate, lower, plan and build g; false (said once) when cuDNN
 * refuses at any step */
bool
finish(fe::graph::Graph &g, cudnnHandle_t h, int64_t *ws, const char *what,
    int B, int T, int C, int NH)
{
	fe::error_t e = g.validate();

	if (e.is_good())
		e = g.build_operation_graph(h);
	if (e.is_good())
		e = g.create_execution_plans({ fe::HeurMode_t::A });
	if (e.is_good())
		e = g.check_support(h);
	if (e.is_good())
		e = g.build_plans(h);
	if (e.is_good())
		e = g.get_workspace_size(*ws);
	if (e.is_good())
		return true;
	if (!said) {
		said = true;
		fprintf(stderr, "shardtrain: cuda: cuDNN's fused attention "
		    "(%s, batch %d, %d tokens, width %d, %d heads) is not "
		    "supported here: %s; using the unfused attention\n", what,
		    B, T, C, NH, e.get_message().c_str());
	}
	return false;
}

plan &
forward_plan(cudnnHandle_t h, int B, int T, int C, int NH, float scale)
{
	plan_key k(B, T, C, NH, 0, 0);
	auto it = plans.find(k);

	if (it != plans.end())
		return it->second;
	plan &p = plans[k];
	auto g = std::make_shared<fe::graph::Graph>();
	int64_t hd = C / NH;

	g->set_io_data_type(fe::DataType_t::BFLOAT16)
	    .set_intermediate_data_type(fe::DataType_t::FLOAT)
	    .set_compute_data_type(fe::DataType_t::FLOAT);
	auto q = heads(*g, "q", U_Q, B, NH, T, hd, 3 * (int64_t)C);
	auto kk = heads(*g, "k", U_K, B, NH, T, hd, 3 * (int64_t)C);
	auto v = heads(*g, "v", U_V, B, NH, T, hd, 3 * (int64_t)C);
	auto opts = fe::graph::SDPA_attributes().set_name("sdpa")
	    .set_generate_stats(true).set_attn_scale(scale);
	auto [o, stats] = g->sdpa(q, kk, v, opts);

	out_heads(o, U_O, B, NH, T, hd, C);
	stats->set_output(true).set_uid(U_STATS)
	    .set_data_type(fe::DataType_t::FLOAT)
	    .set_dim({ B, NH, T, 1 }).set_stride({ NH * (int64_t)T, T, 1, 1 });
	if (finish(*g, h, &p.ws, "forward", B, T, C, NH))
		p.g = g;
	return p;
}

plan &
backward_plan(cudnnHandle_t h, int B, int T, int C, int NH, float scale,
    int det)
{
	plan_key k(B, T, C, NH, 1, det != 0);
	auto it = plans.find(k);

	if (it != plans.end())
		return it->second;
	plan &p = plans[k];
	auto g = std::make_shared<fe::graph::Graph>();
	int64_t hd = C / NH, r3 = 3 * (int64_t)C;

	g->set_io_data_type(fe::DataType_t::BFLOAT16)
	    .set_intermediate_data_type(fe::DataType_t::FLOAT)
	    .set_compute_data_type(fe::DataType_t::FLOAT);
	auto q = heads(*g, "q", U_Q, B, NH, T, hd, r3);
	auto kk = heads(*g, "k", U_K, B, NH, T, hd, r3);
	auto v = heads(*g, "v", U_V, B, NH, T, hd, r3);
	auto o = heads(*g, "o", U_O, B, NH, T, hd, C);
	auto dO = heads(*g, "do", U_DO, B, NH, T, hd, C);
	auto stats = g->tensor(fe::graph::Tensor_attributes().set_name("stats")
	    .set_uid(U_STATS).set_data_type(fe::DataType_t::FLOAT)
	    .set_dim({ B, NH, T, 1 }).set_stride({ NH * (int64_t)T, T, 1, 1 }));
	auto opts = fe::graph::SDPA_backward_attributes().set_name("sdpa_bwd")
	    .set_attn_scale(scale).set_deterministic_algorithm(det != 0);
	auto [dq, dk, dv] = g->sdpa_backward(q, kk, v, o, dO, stats, opts);

	out_heads(dq, U_DQ, B, NH, T, hd, r3);
	out_heads(dk, U_DK, B, NH, T, hd, r3);
	out_heads(dv, U_DV, B, NH, T, hd, r3);
	if (finish(*g, h, &p.ws, "backward", B, T, C, NH))
		p.g = g;
	return p;
}

/* run p with the pointers by uid; -1 when cuDNN fails to launch it (said
 * once), so the caller can still take the math path */
int
run(plan &p, cudnnHandle_t h, void *stream,
    std::unordered_map<int64_t, void *> &ptrs)
{
	void *ws = NULL;

	if (p.ws > 0 && (ws = cuk_workspace((size_t)p.ws, stream)) == NULL)
		return -1;
	fe::error_t e = p.g->execute(h, ptrs, ws);
	if (e.is_good())
		return 0;
	if (!said) {
		said = true;
		fprintf(stderr, "shardtrain: cuda: cuDNN's fused attention "
		    "failed: %s; using the unfused attention\n",
		    e.get_message().c_str());
	}
	p.g = NULL;
	return -1;
}

} /* namespace */

extern "C" int
cusdpa_forward(void *handle, void *stream, void *out, float *stats,
    const void *qkv, int B, int T, int C, int NH, float scale,
    int deterministic)
{
	cudnnHandle_t h = (cudnnHandle_t)handle;
	const uint16_t *x = (const uint16_t *)qkv;

	if (B <= 0 || T <= 0 || NH <= 0 || C % NH != 0)
		return -1;
	plan &p = forward_plan(h, B, T, C, NH, scale);
	plan &pb = backward_plan(h, B, T, C, NH, scale, deterministic);
	if (p.g == NULL || pb.g == NULL) {
		p.g = pb.g = NULL;	/* neither, from now on */
		return -1;
	}
	std::unordered_map<int64_t, void *> ptrs = {
		{ U_Q, (void *)x }, { U_K, (void *)(x + C) },
		{ U_V, (void *)(x + 2 * (size_t)C) }, { U_O, out },
		{ U_STATS, stats },
	};
	if (run(p, h, stream, ptrs) != 0) {
		pb.g = NULL;
		return -1;
	}
	return 0;
}

extern "C" int
cusdpa_backward(void *handle, void *stream, void *dqkv, const void *dout,
    const void *qkv, const void *out, const float *stats, int B, int T,
    int C, int NH, float scale, int deterministic)
{
	cudnnHandle_t h = (cudnnHandle_t)handle;
	const uint16_t *x = (const uint16_t *)qkv;
	uint16_t *dx = (uint16_t *)dqkv;

	(void)scale;	/* the plan's, from the forward */
	if (B <= 0 || T <= 0 || NH <= 0 || C % NH != 0)
		return -1;
	/* planned by the forward, or that shape ran unfused */
	auto it = plans.find(plan_key(B, T, C, NH, 1, deterministic != 0));
	if (it == plans.end() || it->second.g == NULL)
		return -1;
	plan &p = it->second;
	std::unordered_map<int64_t, void *> ptrs = {
		{ U_Q, (void *)x }, { U_K, (void *)(x + C) },
		{ U_V, (void *)(x + 2 * (size_t)C) }, { U_O, (void *)out },
		{ U_DO, (void *)dout }, { U_STATS, (void *)stats },
		{ U_DQ, dx }, { U_DK, dx + C }, { U_DV, dx + 2 * (size_t)C },
	};
	return run(p, h, stream, ptrs) == 0 ? 0 : -2;
}

#else /* !HAVE_CUDNN_FRONTEND */

extern "C" int
cusdpa_forward(void *handle, void *stream, void *out, float *stats,
    const void *qkv, int B, int T, int C, int NH, float scale,
    int deterministic)
{
	(void)handle, (void)stream, (void)out, (void)stats, (void)qkv;
	(void)B, (void)T, (void)C, (void)NH, (void)scale, (void)deterministic;
	return -1;
}

extern "C" int
cusdpa_backward(void *handle, void *stream, void *dqkv, const void *dout,
    const void *qkv, const void *out, const float *stats, int B, int T,
    int C, int NH, float scale, int deterministic)
{
	(void)handle, (void)stream, (void)dqkv, (void)dout, (void)qkv;
	(void)out, (void)stats, (void)B, (void)T, (void)C, (void)NH;
	(void)scale, (void)deterministic;
	return -1;
}

#endif /* HAVE_CUDNN_FRONTEND */
