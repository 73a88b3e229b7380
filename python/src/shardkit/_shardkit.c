/*
 * _shardkit.c - the CPython extension under the shardkit package: the
 * loader of libshardkit, its batches handed to NumPy and PyTorch through
 * DLPack without a copy, the fetch engine's options and counters, and the
 * verdict's rule. Everything here is glue; the work is libshardkit's.
 *
 * Built against the stable ABI (Py_LIMITED_API 3.9): one abi3 wheel serves
 * every CPython from 3.9 on. DLPack needs nothing beyond capsules.
 *
 * Who owns what: a Batch holds one ring slot of the loader (or, once kept,
 * the slot's old memory); the images and labels Arrays hold the Batch; a
 * DLPack capsule, and the tensor a consumer made from it, hold the Array.
 * When the last of them goes, the slot goes back to the ring. A consumer
 * that holds more batches than the ring has slots does not stop the loader:
 * the oldest held batch is kept (sk_loader_keep: its memory leaves the ring
 * with it, unchanged, and the slot gets new memory).
 */
#define Py_LIMITED_API 0x03090000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <shardkit.h>

/* ------------------------------------------------------------------------ */
/* DLPack: the ABI of dlpack.h, version 1.0                                 */

enum { DL_CPU = 1, DL_CUDA = 2 };
enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4 };

typedef struct {
	int32_t device_type;
	int32_t device_id;
} DLDevice;

typedef struct {
	uint8_t code;
	uint8_t bits;
	uint16_t lanes;
} DLDataType;

typedef struct {
	void *data;
	DLDevice device;
	int32_t ndim;
	DLDataType dtype;
	int64_t *shape;
	int64_t *strides;	/* NULL: compact, row-major */
	uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
	DLTensor dl_tensor;
	void *manager_ctx;
	void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct {
	uint32_t major;
	uint32_t minor;
} DLPackVersion;

typedef struct DLManagedTensorVersioned {
	DLPackVersion version;
	void *manager_ctx;
	void (*deleter)(struct DLManagedTensorVersioned *self);
	uint64_t flags;
	DLTensor dl_tensor;
} DLManagedTensorVersioned;

#define MAXDIM 4

/* ------------------------------------------------------------------------ */
/* module state                                                             */

static PyObject *Error;		/* shardkit.Error (RuntimeError) */
static PyObject *FormatError;	/* shardkit.FormatError (Error) */
static PyTypeObject *LoaderType, *BatchType, *ArrayType;

/* The exception for a libshardkit code, carrying its message. */
static PyObject *
raise_code(int code, const char *msg)
{
	PyObject *t;

	switch (code) {
	case SK_ENOENT:
		t = PyExc_FileNotFoundError;
		break;
	case SK_EACCES:
		t = PyExc_PermissionError;
		break;
	case SK_EINVAL:
		t = PyExc_ValueError;
		break;
	case SK_EFORMAT:
	case SK_EDECODE:
	case SK_ETOOBIG:
		t = FormatError;
		break;
	case SK_ENETWORK:
	case SK_ECHANGED:
		t = PyExc_ConnectionError;
		break;
	case SK_ENOMEM:
		t = PyExc_MemoryError;
		break;
	case SK_EIO:
	case SK_ENOSPC:
		t = PyExc_OSError;
		break;
	default:
		t = Error;
		break;
	}
	PyErr_SetString(t, msg != NULL && *msg != '\0' ? msg :
	    sk_strerror(code));
	return NULL;
}

/* ------------------------------------------------------------------------ */
/* Loader and Batch                                                         */

enum { HELD = 0, KEPT, GONE };

typedef struct BatchObject BatchObject;

typedef struct {
	PyObject_HEAD
	sk_loader *l;
	long pid;		/* the process that opened it */
	int nslots;
	int decode;
	int device;		/* -1: host batches */
	int64_t delivered;	/* batches handed out */
	int64_t kept;		/* of them, kept out of the ring */
	int busy;		/* a next() waits with the GIL released */
	BatchObject **owner;	/* (nslots) the Batch holding each slot;
				 * borrowed: a Batch clears its entry */
} LoaderObject;

struct BatchObject {
	PyObject_HEAD
	LoaderObject *loader;	/* while HELD */
	struct sk_batch b;
	int state;
};

static int
check_process(LoaderObject *self)
{
	if ((long)getpid() != self->pid) {
		PyErr_Format(Error, "this shardkit.Loader was made in process "
		    "%ld, and process %ld is a fork() of it: its threads did "
		    "not come along. Make the loader in the process that "
		    "uses it (after the fork, e.g. in a DataLoader worker's "
		    "worker_init_fn), or start children with 'spawn'",
		    self->pid, (long)getpid());
		return -1;
	}
	if (self->l == NULL) {
		PyErr_SetString(PyExc_ValueError, "the loader is closed");
		return -1;
	}
	return 0;
}

/* Move a held batch's memory out of the ring. */
static int
keep_batch(LoaderObject *self, BatchObject *bo)
{
	int slot = bo->b.slot, rc;

	if ((rc = sk_loader_keep(self->l, &bo->b)) != 0) {
		raise_code(rc, sk_errmsg(self->l));
		return -1;
	}
	self->owner[slot] = NULL;
	self->kept++;
	bo->state = KEPT;
	Py_CLEAR(bo->loader);
	return 0;
}

/* Keep every held batch and close the loader: what is held stays valid. */
static int
loader_shut(LoaderObject *self)
{
	sk_loader *l;
	int i, rc = 0;

	if (self->l == NULL)
		return 0;
	Py_INCREF(self);	/* keep_batch may drop the last Batch's ref */
	for (i = 0; i < self->nslots; i++)
		if (self->owner[i] != NULL && keep_batch(self,
		    self->owner[i]) != 0)
			rc = -1;
	l = self->l;
	self->l = NULL;
	Py_BEGIN_ALLOW_THREADS
	sk_loader_close(l);
	Py_END_ALLOW_THREADS
	Py_DECREF(self);
	return rc;
}

static void
Loader_dealloc(LoaderObject *self)
{
	PyTypeObject *tp = Py_TYPE(self);
	freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);

	if (self->l != NULL) {
		/* A fork's copy has no threads to stop: leave it. */
		if ((long)getpid() == self->pid) {
			sk_loader *l = self->l;

			self->l = NULL;
			Py_BEGIN_ALLOW_THREADS
			sk_loader_close(l);
			Py_END_ALLOW_THREADS
		}
	}
	free(self->owner);
	tp_free(self);
	Py_DECREF(tp);
}

/* Config items: a dict of the sk_loader_config fields by name. */
static int
get_int(PyObject *d, const char *key, int *out)
{
	PyObject *v = PyDict_GetItemString(d, key);
	long x;

	if (v == NULL)
		return 0;
	x = PyLong_AsLong(v);
	if (x == -1 && PyErr_Occurred())
		return -1;
	if (x < INT32_MIN || x > INT32_MAX) {
		PyErr_Format(PyExc_OverflowError, "%s: %ld is out of range",
		    key, x);
		return -1;
	}
	*out = (int)x;
	return 0;
}

static int
get_u64(PyObject *d, const char *key, uint64_t *out)
{
	PyObject *v = PyDict_GetItemString(d, key);
	unsigned long long x;

	if (v == NULL)
		return 0;
	x = PyLong_AsUnsignedLongLong(v);
	if (x == (unsigned long long)-1 && PyErr_Occurred())
		return -1;
	*out = (uint64_t)x;
	return 0;
}

static int
get_reals(PyObject *d, const char *key, double *out, int n)
{
	PyObject *v = PyDict_GetItemString(d, key), *it;
	int i;

	if (v == NULL)
		return 0;
	if (!PyTuple_Check(v) || PyTuple_Size(v) != n) {
		PyErr_Format(PyExc_TypeError, "%s: need a tuple of %d numbers",
		    key, n);
		return -1;
	}
	for (i = 0; i < n; i++) {
		it = PyTuple_GetItem(v, i);
		out[i] = PyFloat_AsDouble(it);
		if (out[i] == -1.0 && PyErr_Occurred())
			return -1;
	}
	return 0;
}

/* A str item as the file system encodes it (NULL: none, or an error);
 * *hold keeps the bytes until the caller drops it. */
static const char *
get_str(PyObject *d, const char *key, PyObject **hold)
{
	PyObject *v = PyDict_GetItemString(d, key);

	*hold = NULL;
	if (v == NULL || v == Py_None)
		return NULL;
	if ((*hold = PyUnicode_EncodeFSDefault(v)) == NULL)
		return NULL;
	return PyBytes_AsString(*hold);
}

/*
 * Opening reads a manifest or lists a folder, which may wait on the
 * network: it runs on a thread of its own, so that Ctrl-C ends the wait
 * at once. An open given up on finishes on its thread and closes what it
 * opened.
 */
struct opener {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	struct sk_loader_config c;
	char *urls, *manifest;	/* c's strings */
	sk_loader *l;
	int rc;
	int done, abandoned;
};

static void
opener_free(struct opener *o)
{
	pthread_mutex_destroy(&o->mu);
	pthread_cond_destroy(&o->cond);
	free(o->urls);
	free(o->manifest);
	free(o);
}

static void *
opener_main(void *arg)
{
	struct opener *o = arg;
	sk_loader *l;
	int rc, abandoned;

	rc = sk_loader_open(&l, &o->c);
	pthread_mutex_lock(&o->mu);
	o->l = l;
	o->rc = rc;
	o->done = 1;
	abandoned = o->abandoned;
	pthread_cond_signal(&o->cond);
	pthread_mutex_unlock(&o->mu);
	if (abandoned) {
		sk_loader_close(l);
		opener_free(o);
	}
	return NULL;
}

/* sk_loader_open, waiting in steps that notice Ctrl-C: 0 and *out, or -1
 * with a Python exception (*out NULL, or the failed loader to report). */
static int
open_interruptible(const struct sk_loader_config *c, sk_loader **out,
    int *rc)
{
	struct opener *o;
	pthread_condattr_t ca;
	pthread_attr_t ta;
	pthread_t th;
	int done, err;

	*out = NULL;
	if ((o = calloc(1, sizeof *o)) == NULL) {
		PyErr_NoMemory();
		return -1;
	}
	o->c = *c;
	if ((c->urls != NULL && (o->urls = strdup(c->urls)) == NULL) ||
	    (c->manifest != NULL && (o->manifest = strdup(c->manifest)) ==
	    NULL)) {
		free(o->urls);
		free(o);
		PyErr_NoMemory();
		return -1;
	}
	o->c.urls = o->urls;
	o->c.manifest = o->manifest;
	pthread_mutex_init(&o->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&o->cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_attr_init(&ta);
	pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
	err = pthread_create(&th, &ta, opener_main, o);
	pthread_attr_destroy(&ta);
	if (err != 0) {
		opener_free(o);
		PyErr_Format(PyExc_RuntimeError, "cannot start a thread: %s",
		    strerror(err));
		return -1;
	}
	for (;;) {
		struct timespec ts;

		Py_BEGIN_ALLOW_THREADS
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += 50 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_mutex_lock(&o->mu);
		while (!o->done && pthread_cond_timedwait(&o->cond, &o->mu,
		    &ts) != ETIMEDOUT)
			;
		done = o->done;
		pthread_mutex_unlock(&o->mu);
		Py_END_ALLOW_THREADS
		if (done)
			break;
		if (PyErr_CheckSignals() < 0) {
			pthread_mutex_lock(&o->mu);
			if (!o->done) {
				/* the thread frees it all when it is done */
				o->abandoned = 1;
				pthread_mutex_unlock(&o->mu);
				return -1;
			}
			pthread_mutex_unlock(&o->mu);
			Py_BEGIN_ALLOW_THREADS
			sk_loader_close(o->l);
			Py_END_ALLOW_THREADS
			opener_free(o);
			return -1;
		}
	}
	*out = o->l;
	*rc = o->rc;
	opener_free(o);
	return 0;
}

static int
Loader_init(LoaderObject *self, PyObject *args, PyObject *kwds)
{
	struct sk_loader_config c;
	struct sk_loader_stats st;
	PyObject *d, *hold_urls, *hold_manifest;
	double scale[2], ratio[2], mean[3], stdv[3];
	int crop, dtype, layout, remainder, form, i, rc;
	sk_loader *l;

	if (!PyArg_ParseTuple(args, "O!:Loader", &PyDict_Type, &d))
		return -1;
	if (self->l != NULL) {
		PyErr_SetString(PyExc_ValueError, "the loader is open already");
		return -1;
	}
	sk_loader_config_init(&c);
	memcpy(scale, (double[2]){ c.scale[0], c.scale[1] }, sizeof scale);
	memcpy(ratio, (double[2]){ c.ratio[0], c.ratio[1] }, sizeof ratio);
	for (i = 0; i < 3; i++) {
		mean[i] = c.mean[i];
		stdv[i] = c.std[i];
	}
	crop = c.crop;
	dtype = c.dtype;
	layout = c.layout;
	remainder = c.remainder;
	form = c.form;
	c.urls = get_str(d, "urls", &hold_urls);
	c.manifest = get_str(d, "manifest", &hold_manifest);
	if (PyErr_Occurred() || get_int(d, "form", &form) ||
	    get_int(d, "batch", &c.batch) || get_int(d, "epoch", &c.epoch) ||
	    get_int(d, "epochs", &c.epochs) || get_u64(d, "seed", &c.seed) ||
	    get_int(d, "rank", &c.rank) || get_int(d, "world", &c.world) ||
	    get_int(d, "workers", &c.workers) ||
	    get_int(d, "io_streams", &c.io_streams) ||
	    get_int(d, "shuffle", &c.shuffle) || get_int(d, "ring", &c.ring) ||
	    get_int(d, "image_size", &c.image_size) ||
	    get_int(d, "crop", &crop) || get_reals(d, "scale", scale, 2) ||
	    get_reals(d, "ratio", ratio, 2) ||
	    get_int(d, "resize", &c.resize) || get_int(d, "flip", &c.flip) ||
	    get_int(d, "dtype", &dtype) || get_int(d, "layout", &layout) ||
	    get_reals(d, "mean", mean, 3) || get_reals(d, "std", stdv, 3) ||
	    get_int(d, "strict", &c.strict) ||
	    get_u64(d, "max_pixels", &c.max_pixels) ||
	    get_u64(d, "max_sample_bytes", &c.max_sample_bytes) ||
	    get_int(d, "remainder", &remainder) ||
	    get_int(d, "resume_batch", &c.resume_batch) ||
	    get_int(d, "decode", &c.decode) ||
	    get_int(d, "ahead", &c.ahead) ||
	    get_u64(d, "max_inflight", &c.max_inflight) ||
	    get_int(d, "device", &c.device)) {
		Py_XDECREF(hold_urls);
		Py_XDECREF(hold_manifest);
		return -1;
	}
	{
		uint64_t pf = c.prefetch_bytes;

		if (get_u64(d, "prefetch_bytes", &pf)) {
			Py_XDECREF(hold_urls);
			Py_XDECREF(hold_manifest);
			return -1;
		}
		c.prefetch_bytes = (size_t)pf;
	}
	c.crop = (enum sk_crop)crop;
	c.dtype = (enum sk_dtype)dtype;
	c.layout = (enum sk_layout)layout;
	c.remainder = (enum sk_remainder)remainder;
	c.form = (enum sk_form)form;
	c.scale[0] = scale[0];
	c.scale[1] = scale[1];
	c.ratio[0] = ratio[0];
	c.ratio[1] = ratio[1];
	for (i = 0; i < 3; i++) {
		c.mean[i] = (float)mean[i];
		c.std[i] = (float)stdv[i];
	}

	/* Reading a manifest or listing a folder may take the network. */
	i = open_interruptible(&c, &l, &rc);
	Py_XDECREF(hold_urls);
	Py_XDECREF(hold_manifest);
	if (i != 0)
		return -1;
	if (rc != 0) {
		if (l == NULL)
			PyErr_NoMemory();
		else
			raise_code(rc, sk_errmsg(l));
		Py_BEGIN_ALLOW_THREADS
		sk_loader_close(l);
		Py_END_ALLOW_THREADS
		return -1;
	}
	sk_loader_stats(l, &st);
	if ((self->owner = calloc((size_t)st.ring, sizeof *self->owner)) ==
	    NULL) {
		sk_loader_close(l);
		PyErr_NoMemory();
		return -1;
	}
	self->l = l;
	self->pid = (long)getpid();
	self->nslots = st.ring;
	self->decode = c.decode;
	self->device = c.device;
	return 0;
}


static void
Batch_dealloc(BatchObject *self)
{
	PyTypeObject *tp = Py_TYPE(self);
	freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
	LoaderObject *lo = self->loader;

	if (self->state == HELD && lo != NULL && lo->l != NULL &&
	    (long)getpid() == lo->pid) {
		sk_loader *l = lo->l;

		lo->owner[self->b.slot] = NULL;
		/* device mode waits here for the copy out of the slot */
		Py_BEGIN_ALLOW_THREADS
		(void)sk_loader_release(l, &self->b);
		Py_END_ALLOW_THREADS
	} else if (self->state == KEPT) {
		sk_batch_free(&self->b);
	}
	self->state = GONE;
	Py_CLEAR(self->loader);
	tp_free(self);
	Py_DECREF(tp);
}

/* ------------------------------------------------------------------------ */
/* Array: one tensor of a batch, exported through DLPack                    */

typedef struct {
	PyObject_HEAD
	BatchObject *batch;	/* owns the memory */
	void *data;
	int ndim;
	int64_t shape[MAXDIM];
	DLDataType dtype;
	DLDevice device;
	const char *dtype_name;
	size_t nbytes;
} ArrayObject;

static void
Array_dealloc(ArrayObject *self)
{
	PyTypeObject *tp = Py_TYPE(self);
	freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);

	Py_CLEAR(self->batch);
	tp_free(self);
	Py_DECREF(tp);
}

static PyObject *
new_array(BatchObject *bo, void *data, int ndim, const int64_t *shape,
    enum sk_dtype dt, int cuda, int device)
{
	ArrayObject *a;
	size_t n = 1;
	int i;

	if ((a = (ArrayObject *)PyType_GenericAlloc(ArrayType, 0)) == NULL)
		return NULL;
	Py_INCREF(bo);
	a->batch = bo;
	a->data = data;
	a->ndim = ndim;
	for (i = 0; i < ndim; i++) {
		a->shape[i] = shape[i];
		n *= (size_t)shape[i];
	}
	a->dtype.lanes = 1;
	switch (dt) {
	case SK_DTYPE_U8:
		a->dtype.code = DL_UINT;
		a->dtype.bits = 8;
		a->dtype_name = "uint8";
		break;
	case SK_DTYPE_F32:
		a->dtype.code = DL_FLOAT;
		a->dtype.bits = 32;
		a->dtype_name = "float32";
		break;
	case SK_DTYPE_BF16:
		a->dtype.code = DL_BFLOAT;
		a->dtype.bits = 16;
		a->dtype_name = "bfloat16";
		break;
	case SK_DTYPE_F16:
		a->dtype.code = DL_FLOAT;
		a->dtype.bits = 16;
		a->dtype_name = "float16";
		break;
	default:	/* labels */
		a->dtype.code = DL_INT;
		a->dtype.bits = 32;
		a->dtype_name = "int32";
		break;
	}
	a->nbytes = n * a->dtype.bits / 8;
	a->device.device_type = cuda ? DL_CUDA : DL_CPU;
	a->device.device_id = cuda ? device : 0;
	return (PyObject *)a;
}

struct legacy_export {
	DLManagedTensor t;
	int64_t shape[MAXDIM];
};

struct versioned_export {
	DLManagedTensorVersioned t;
	int64_t shape[MAXDIM];
};

/* A consumer is done with the memory: drop its reference to the Array,
 * from whatever thread it is. */
static void
drop_ctx(void *ctx)
{
	PyGILState_STATE g;

	/* after the interpreter ended, there is nothing left to free */
	if (ctx == NULL || !Py_IsInitialized())
		return;
	g = PyGILState_Ensure();
	Py_DECREF((PyObject *)ctx);
	PyGILState_Release(g);
}

static void
legacy_deleter(DLManagedTensor *t)
{
	drop_ctx(t->manager_ctx);
	free(t);
}

static void
versioned_deleter(DLManagedTensorVersioned *t)
{
	drop_ctx(t->manager_ctx);
	free(t);
}

/* A capsule no one consumed still owns its tensor. */
static void
capsule_free(PyObject *cap, const char *name)
{
	PyObject *et, *ev, *tb;
	void *t;

	if (!PyCapsule_IsValid(cap, name))
		return;
	PyErr_Fetch(&et, &ev, &tb);
	if ((t = PyCapsule_GetPointer(cap, name)) != NULL) {
		if (strcmp(name, "dltensor") == 0)
			legacy_deleter(t);
		else
			versioned_deleter(t);
	}
	PyErr_Restore(et, ev, tb);
}

static void
legacy_capsule_free(PyObject *cap)
{
	capsule_free(cap, "dltensor");
}

static void
versioned_capsule_free(PyObject *cap)
{
	capsule_free(cap, "dltensor_versioned");
}

static void
fill_tensor(DLTensor *dt, ArrayObject *a, int64_t *shape)
{
	memcpy(shape, a->shape, sizeof a->shape);
	dt->data = a->data;
	dt->device = a->device;
	dt->ndim = a->ndim;
	dt->dtype = a->dtype;
	dt->shape = shape;
	dt->strides = NULL;
	dt->byte_offset = 0;
}

PyDoc_STRVAR(dlpack_doc,
"__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)\n"
"\n"
"A DLPack capsule of this array's memory, without a copy (the protocol\n"
"behind torch.from_dlpack and numpy.from_dlpack). A CUDA array makes\n"
"stream (1: the legacy default stream, 2: the per-thread one, -1: none)\n"
"wait for the loader's copy. copy=True is refused: the point is not to\n"
"copy.");

static PyObject *
Array_dlpack(ArrayObject *self, PyObject *args, PyObject *kwds)
{
	static char *kwlist[] = { "stream", "max_version", "dl_device", "copy",
	    NULL };
	PyObject *stream = Py_None, *maxv = Py_None, *dev = Py_None,
	    *copy = Py_None, *cap;
	long major = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$OOOO:__dlpack__",
	    kwlist, &stream, &maxv, &dev, &copy))
		return NULL;
	if (copy != Py_None && PyObject_IsTrue(copy)) {
		PyErr_SetString(PyExc_BufferError, "shardkit arrays are "
		    "exported without a copy (copy=True): copy the tensor "
		    "made from it instead");
		return NULL;
	}
	if (dev != Py_None) {
		long t, id;

		if (!PyArg_ParseTuple(dev, "ll", &t, &id))
			return NULL;
		if (t != self->device.device_type ||
		    id != self->device.device_id) {
			PyErr_Format(PyExc_BufferError, "dl_device (%ld, %ld): "
			    "this array lives on (%d, %d) and is not copied",
			    t, id, (int)self->device.device_type,
			    (int)self->device.device_id);
			return NULL;
		}
	}
	if (maxv != Py_None) {
		PyObject *m;

		if (!PyTuple_Check(maxv) || PyTuple_Size(maxv) < 1) {
			PyErr_SetString(PyExc_TypeError, "max_version: need "
			    "a (major, minor) tuple");
			return NULL;
		}
		m = PyTuple_GetItem(maxv, 0);
		if ((major = PyLong_AsLong(m)) == -1 && PyErr_Occurred())
			return NULL;
	}
	if (self->device.device_type == DL_CUDA) {
		struct sk_error err;
		long long s = 1;

		if (stream != Py_None &&
		    (s = PyLong_AsLongLong(stream)) == -1 && PyErr_Occurred())
			return NULL;
		if (s == 0) {
			PyErr_SetString(PyExc_ValueError, "stream 0 is "
			    "ambiguous in DLPack: pass 1 for the legacy "
			    "default stream");
			return NULL;
		}
		if (s != -1 && self->batch->b.ready_event != NULL &&
		    sk_batch_stream_wait(&self->batch->b, (uintptr_t)s,
		    &err) != 0)
			return raise_code(err.code, err.msg);
	}
	if (major >= 1) {
		struct versioned_export *e = calloc(1, sizeof *e);

		if (e == NULL)
			return PyErr_NoMemory();
		e->t.version.major = 1;
		e->t.version.minor = 0;
		fill_tensor(&e->t.dl_tensor, self, e->shape);
		e->t.manager_ctx = self;
		e->t.deleter = versioned_deleter;
		Py_INCREF(self);
		if ((cap = PyCapsule_New(&e->t, "dltensor_versioned",
		    versioned_capsule_free)) == NULL)
			versioned_deleter(&e->t);
		return cap;
	} else {
		struct legacy_export *e = calloc(1, sizeof *e);

		if (e == NULL)
			return PyErr_NoMemory();
		fill_tensor(&e->t.dl_tensor, self, e->shape);
		e->t.manager_ctx = self;
		e->t.deleter = legacy_deleter;
		Py_INCREF(self);
		if ((cap = PyCapsule_New(&e->t, "dltensor",
		    legacy_capsule_free)) == NULL)
			legacy_deleter(&e->t);
		return cap;
	}
}

static PyObject *
Array_dlpack_device(ArrayObject *self, PyObject *unused)
{
	return Py_BuildValue("(ii)", (int)self->device.device_type,
	    (int)self->device.device_id);
}

static PyObject *
Array_get_shape(ArrayObject *self, void *unused)
{
	PyObject *t = PyTuple_New(self->ndim);
	int i;

	if (t == NULL)
		return NULL;
	for (i = 0; i < self->ndim; i++) {
		PyObject *v = PyLong_FromLongLong(self->shape[i]);

		if (v == NULL || PyTuple_SetItem(t, i, v) != 0) {
			Py_DECREF(t);
			return NULL;
		}
	}
	return t;
}

static PyObject *
Array_get_dtype(ArrayObject *self, void *unused)
{
	return PyUnicode_FromString(self->dtype_name);
}

static PyObject *
Array_get_device(ArrayObject *self, void *unused)
{
	if (self->device.device_type == DL_CUDA)
		return PyUnicode_FromFormat("cuda:%d",
		    (int)self->device.device_id);
	return PyUnicode_FromString("cpu");
}

static PyObject *
Array_get_ptr(ArrayObject *self, void *unused)
{
	return PyLong_FromVoidPtr(self->data);
}

static PyObject *
Array_get_nbytes(ArrayObject *self, void *unused)
{
	return PyLong_FromSize_t(self->nbytes);
}

static PyObject *
Array_get_kept(ArrayObject *self, void *unused)
{
	return PyBool_FromLong(self->batch->state == KEPT);
}

static PyObject *
Array_repr(ArrayObject *self)
{
	char shape[96];
	int i, k = 0;

	for (i = 0; i < self->ndim && k < (int)sizeof shape - 24; i++)
		k += snprintf(shape + k, sizeof shape - (size_t)k, "%s%lld",
		    i ? ", " : "", (long long)self->shape[i]);
	return PyUnicode_FromFormat("shardkit.Array(shape=(%s%s), dtype=%s, "
	    "device=%s)", shape, self->ndim == 1 ? "," : "", self->dtype_name,
	    self->device.device_type == DL_CUDA ? "cuda" : "cpu");
}

static PyMethodDef Array_methods[] = {
	{ "__dlpack__", (PyCFunction)(void (*)(void))Array_dlpack,
	    METH_VARARGS | METH_KEYWORDS, dlpack_doc },
	{ "__dlpack_device__", (PyCFunction)Array_dlpack_device, METH_NOARGS,
	    "(device type, device id) as DLPack numbers them: (1, 0) for "
	    "the host, (2, N) for CUDA device N." },
	{ NULL, NULL, 0, NULL }
};

static PyGetSetDef Array_getset[] = {
	{ "shape", (getter)Array_get_shape, NULL, "the dimensions", NULL },
	{ "dtype", (getter)Array_get_dtype, NULL, "uint8, float32, bfloat16, "
	    "float16 or int32", NULL },
	{ "device", (getter)Array_get_device, NULL, "'cpu' or 'cuda:N'",
	    NULL },
	{ "data_ptr", (getter)Array_get_ptr, NULL, "the address of the first "
	    "element (in the loader's batch slot)", NULL },
	{ "nbytes", (getter)Array_get_nbytes, NULL, "bytes of the data",
	    NULL },
	{ "kept", (getter)Array_get_kept, NULL, "whether the batch was taken "
	    "out of the ring because it was held too long", NULL },
	{ NULL, NULL, NULL, NULL, NULL }
};

static PyType_Slot Array_slots[] = {
	{ Py_tp_dealloc, (void *)Array_dealloc },
	{ Py_tp_methods, Array_methods },
	{ Py_tp_getset, Array_getset },
	{ Py_tp_repr, (void *)Array_repr },
	{ Py_tp_doc, (void *)"One tensor of a batch in the loader's memory. "
	    "torch.from_dlpack(a) and numpy.from_dlpack(a) take it without a "
	    "copy; the batch slot goes back to the loader when the last "
	    "tensor made from it is gone." },
	{ 0, NULL }
};

static PyType_Spec Array_spec = {
	"shardkit.Array", sizeof(ArrayObject), 0, Py_TPFLAGS_DEFAULT,
	Array_slots
};

static PyType_Slot Batch_slots[] = {
	{ Py_tp_dealloc, (void *)Batch_dealloc },
	{ Py_tp_doc, (void *)"A batch slot held for its Arrays (internal)." },
	{ 0, NULL }
};

static PyType_Spec Batch_spec = {
	"shardkit._Batch", sizeof(BatchObject), 0, Py_TPFLAGS_DEFAULT,
	Batch_slots
};

/* ------------------------------------------------------------------------ */
/* Loader methods                                                           */

static PyObject *
Loader_next(LoaderObject *self, PyObject *unused)
{
	BatchObject *bo;
	PyObject *images = NULL, *labels = NULL, *keys = NULL, *res;
	struct sk_batch b;
	int64_t shape[MAXDIM], lshape[1];
	int rc, i, slot;

	if (check_process(self) != 0)
		return NULL;
	/* the GIL is let go while next() waits: another thread may come */
	if (self->busy) {
		PyErr_SetString(PyExc_RuntimeError, "the loader is in use by "
		    "another thread (next() is waiting there); one thread at a "
		    "time may take batches or close it");
		return NULL;
	}
	/* The next batch's slot is still held: keep that batch. */
	slot = (int)(self->delivered % self->nslots);
	if (self->owner[slot] != NULL && keep_batch(self,
	    self->owner[slot]) != 0)
		return NULL;
	self->busy = 1;
	for (;;) {
		Py_BEGIN_ALLOW_THREADS
		rc = sk_loader_next_wait(self->l, &b, 0.05);
		Py_END_ALLOW_THREADS
		if (rc != SK_ETIMEDOUT)
			break;
		/* Ctrl-C: KeyboardInterrupt now; the loader goes on */
		if (PyErr_CheckSignals() < 0) {
			self->busy = 0;
			return NULL;
		}
	}
	self->busy = 0;
	if (rc == 0)
		Py_RETURN_NONE;
	if (rc < 0)
		return raise_code(rc, sk_errmsg(self->l));
	if ((bo = (BatchObject *)PyType_GenericAlloc(BatchType, 0)) == NULL) {
		(void)sk_loader_release(self->l, &b);
		return NULL;
	}
	bo->b = b;
	bo->state = HELD;
	Py_INCREF(self);
	bo->loader = self;
	self->owner[b.slot] = bo;
	self->delivered++;

	if (self->decode) {
		shape[0] = b.n;
		if (b.layout == SK_LAYOUT_NCHW) {
			shape[1] = 3;
			shape[2] = shape[3] = b.size;
		} else {
			shape[1] = shape[2] = b.size;
			shape[3] = 3;
		}
		if (b.device_images != NULL)
			images = new_array(bo, b.device_images, 4, shape,
			    b.dtype, 1, self->device);
		else
			images = new_array(bo, b.images, 4, shape, b.dtype, 0,
			    0);
	} else {
		Py_INCREF(Py_None);
		images = Py_None;
	}
	lshape[0] = b.n;
	labels = new_array(bo, b.labels, 1, lshape, (enum sk_dtype)-1, 0, 0);
	keys = PyList_New(b.n);
	if (images == NULL || labels == NULL || keys == NULL)
		goto fail;
	for (i = 0; i < b.n; i++) {
		PyObject *k = PyUnicode_DecodeFSDefault(b.keys[i]);

		if (k == NULL || PyList_SetItem(keys, i, k) != 0)
			goto fail;
	}
	res = Py_BuildValue("(NNNiL)", images, labels, keys, b.epoch,
	    (long long)b.index);
	Py_DECREF(bo);
	return res;
fail:
	Py_XDECREF(images);
	Py_XDECREF(labels);
	Py_XDECREF(keys);
	Py_DECREF(bo);
	return NULL;
}

static int
set_item(PyObject *d, const char *key, PyObject *v)
{
	int rc;

	if (v == NULL)
		return -1;
	rc = PyDict_SetItemString(d, key, v);
	Py_DECREF(v);
	return rc;
}

#define SET_U(d, k, v) set_item(d, k, PyLong_FromUnsignedLongLong(v))
#define SET_I(d, k, v) set_item(d, k, PyLong_FromLongLong(v))
#define SET_F(d, k, v) set_item(d, k, PyFloat_FromDouble(v))

static PyObject *
Loader_stats(LoaderObject *self, PyObject *unused)
{
	struct sk_loader_stats st;
	PyObject *d, *sk;
	const char *bound;
	double share;
	int i;

	if (check_process(self) != 0)
		return NULL;
	sk_loader_stats(self->l, &st);
	bound = sk_loader_bound(&st, st.wall, self->decode, &share);
	if ((d = PyDict_New()) == NULL)
		return NULL;
	if ((sk = PyDict_New()) == NULL)
		goto fail;
	for (i = 0; i < SK_SKIP_NREASONS; i++)
		if (SET_U(sk, sk_skip_reason_name(i), st.skipped[i]) != 0) {
			Py_DECREF(sk);
			goto fail;
		}
	if (set_item(d, "skipped_by_reason", sk) ||
	    SET_U(d, "batches", st.batches) ||
	    SET_U(d, "samples", st.samples) || SET_U(d, "bytes", st.bytes) ||
	    SET_U(d, "sample_bytes", st.sample_bytes) ||
	    SET_U(d, "skipped", st.skipped_total) ||
	    SET_U(d, "dropped", st.dropped) ||
	    SET_U(d, "unplanned", st.unplanned) ||
	    SET_U(d, "mismatched_shards", st.mismatched_shards) ||
	    SET_U(d, "planned", st.planned) ||
	    SET_I(d, "batches_per_epoch", st.batches_per_epoch) ||
	    SET_U(d, "nshards", st.nshards) ||
	    SET_U(d, "nclasses", st.nclasses) ||
	    SET_U(d, "dataset_samples", st.dataset_samples) ||
	    SET_F(d, "wall", st.wall) || SET_F(d, "io_busy", st.io_busy) ||
	    SET_F(d, "io_blocked", st.io_blocked) ||
	    SET_F(d, "input_wait", st.input_wait) ||
	    SET_F(d, "decode_busy", st.decode_busy) ||
	    SET_F(d, "decode_idle", st.decode_idle) ||
	    SET_F(d, "ring_wait", st.ring_wait) ||
	    SET_F(d, "consumer_wait", st.consumer_wait) ||
	    SET_I(d, "workers", st.workers) ||
	    SET_I(d, "io_streams", st.io_streams) ||
	    SET_I(d, "ahead", st.ahead) ||
	    SET_I(d, "ahead_peak", st.ahead_peak) ||
	    SET_I(d, "ahead_cap", st.ahead_cap) ||
	    SET_I(d, "ring", st.ring) ||
	    SET_U(d, "memory_bound", st.memory_bound) ||
	    set_item(d, "bound", PyUnicode_FromString(bound)) ||
	    SET_F(d, "bound_share", share) ||
	    SET_I(d, "kept", self->kept))
		goto fail;
	return d;
fail:
	Py_DECREF(d);
	return NULL;
}

static PyObject *
Loader_close(LoaderObject *self, PyObject *unused)
{
	if (self->busy) {
		PyErr_SetString(PyExc_RuntimeError, "close(): the loader is "
		    "in use by another thread (next() is waiting there)");
		return NULL;
	}
	if (self->l != NULL && (long)getpid() != self->pid) {
		/* a fork's copy: nothing of it can be stopped or freed */
		self->l = NULL;
		Py_RETURN_NONE;
	}
	if (loader_shut(self) != 0)
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *
Loader_get_closed(LoaderObject *self, void *unused)
{
	return PyBool_FromLong(self->l == NULL);
}

static PyMethodDef Loader_methods[] = {
	{ "next", (PyCFunction)Loader_next, METH_NOARGS,
	    "next() -> (images, labels, keys, epoch, index) or None after "
	    "the last batch. Waits with the GIL released; Ctrl-C raises "
	    "KeyboardInterrupt." },
	{ "stats", (PyCFunction)Loader_stats, METH_NOARGS,
	    "The loader's counters (sk_loader_stats) as a dict." },
	{ "close", (PyCFunction)Loader_close, METH_NOARGS,
	    "Stop the threads and free the ring; batches still held keep "
	    "their memory." },
	{ NULL, NULL, 0, NULL }
};

static PyObject *
Loader_get_note(LoaderObject *self, void *unused)
{
	const char *n = self->l != NULL ? sk_loader_note(self->l) : NULL;

	if (n == NULL)
		Py_RETURN_NONE;
	return PyUnicode_DecodeUTF8(n, (Py_ssize_t)strlen(n), "replace");
}

static PyGetSetDef Loader_getset[] = {
	{ "closed", (getter)Loader_get_closed, NULL, "whether it is closed",
	    NULL },
	{ "note", (getter)Loader_get_note, NULL, "sk_loader_note(): a line "
	    "about the source the user may not expect, or None", NULL },
	{ NULL, NULL, NULL, NULL, NULL }
};

static PyType_Slot Loader_slots[] = {
	{ Py_tp_dealloc, (void *)Loader_dealloc },
	{ Py_tp_init, (void *)Loader_init },
	{ Py_tp_new, (void *)PyType_GenericNew },
	{ Py_tp_methods, Loader_methods },
	{ Py_tp_getset, Loader_getset },
	{ Py_tp_doc, (void *)"_Loader(config: dict): libshardkit's loader "
	    "(shardkit.Loader is the interface to use)." },
	{ 0, NULL }
};

static PyType_Spec Loader_spec = {
	"shardkit._Loader", sizeof(LoaderObject), 0, Py_TPFLAGS_DEFAULT,
	Loader_slots
};

/* ------------------------------------------------------------------------ */
/* module functions                                                         */

static PyObject *
fetch_configure(PyObject *mod, PyObject *args)
{
	struct sk_fetch_config c;
	struct sk_error err;
	PyObject *d, *hold;
	uint64_t ps;
	const char *ca;
	int rc;

	if (!PyArg_ParseTuple(args, "O!:fetch_configure", &PyDict_Type, &d))
		return NULL;
	sk_fetch_get_config(&c);
	ps = c.part_size;
	if (get_int(d, "connections", &c.connections) ||
	    get_int(d, "parts", &c.parts) || get_u64(d, "part_size", &ps) ||
	    get_int(d, "attempts", &c.attempts) ||
	    get_int(d, "no_sign", &c.no_sign) ||
	    get_int(d, "allow_cross_origin", &c.allow_cross_origin))
		return NULL;
	c.part_size = ps;
#define REAL(k) do { \
	PyObject *v = PyDict_GetItemString(d, #k); \
	if (v != NULL && ((c.k = PyFloat_AsDouble(v)) == -1.0 && \
	    PyErr_Occurred())) \
		return NULL; \
} while (0)
	REAL(connect_timeout);
	REAL(stall_timeout);
	REAL(retry_time);
#undef REAL
	ca = get_str(d, "ca_file", &hold);
	if (PyErr_Occurred())
		return NULL;
	if (ca != NULL)
		c.ca_file = ca;
	/* the engine keeps its own copy of the path */
	rc = sk_fetch_configure(&c, &err);
	Py_XDECREF(hold);
	if (rc != 0)
		return raise_code(err.code, err.msg);
	Py_RETURN_NONE;
}

static PyObject *
fetch_stats(PyObject *mod, PyObject *unused)
{
	struct sk_fetch_stats st;
	PyObject *d, *rc;
	int i;

	sk_fetch_stats(&st);
	if ((d = PyDict_New()) == NULL)
		return NULL;
	if ((rc = PyDict_New()) == NULL)
		goto fail;
	for (i = 0; i < SK_RETRY_NCAUSES; i++)
		if (SET_U(rc, sk_retry_cause_name(i),
		    st.retries_by_cause[i]) != 0) {
			Py_DECREF(rc);
			goto fail;
		}
	if (set_item(d, "retries_by_cause", rc) ||
	    SET_U(d, "bytes", st.bytes) ||
	    SET_U(d, "requests", st.requests) ||
	    SET_U(d, "retries", st.retries) ||
	    SET_U(d, "resumes", st.resumes) ||
	    SET_U(d, "refetched_bytes", st.refetched_bytes) ||
	    SET_U(d, "failures", st.failures) ||
	    SET_F(d, "ttfb_seconds", st.ttfb_seconds) ||
	    SET_U(d, "ttfb_count", st.ttfb_count) ||
	    SET_F(d, "wait_seconds", st.wait_seconds))
		goto fail;
	return d;
fail:
	Py_DECREF(d);
	return NULL;
}

static PyObject *
verdict_decide(PyObject *mod, PyObject *args)
{
	double share, lips, cips;
	int free_input;

	if (!PyArg_ParseTuple(args, "dddp:verdict_decide", &share, &lips,
	    &cips, &free_input))
		return NULL;
	return PyUnicode_FromString(sk_verdict_name(sk_verdict_decide(share,
	    lips, cips, free_input)));
}

static PyMethodDef module_methods[] = {
	{ "fetch_configure", fetch_configure, METH_VARARGS,
	    "Set the fetch engine's options (one engine per process)." },
	{ "fetch_stats", fetch_stats, METH_NOARGS,
	    "The fetch engine's counters since the process started." },
	{ "verdict_decide", verdict_decide, METH_VARARGS,
	    "verdict_decide(wait_share, loader_ips, compute_ips, free_input) "
	    "-> 'input-bound' | 'compute-bound' | 'balanced'." },
	{ NULL, NULL, 0, NULL }
};

static struct PyModuleDef module_def = {
	PyModuleDef_HEAD_INIT, "shardkit._shardkit",
	"libshardkit's loader for Python (use the shardkit package).", -1,
	module_methods, NULL, NULL, NULL, NULL
};

static int
add_type(PyObject *m, const char *name, PyType_Spec *spec, PyTypeObject **t)
{
	if ((*t = (PyTypeObject *)PyType_FromSpec(spec)) == NULL)
		return -1;
	Py_INCREF(*t);
	if (PyModule_AddObject(m, name, (PyObject *)*t) != 0) {
		Py_DECREF(*t);
		return -1;
	}
	return 0;
}

static int
add_names(PyObject *m, const char *name, const char *(*fn)(int), int n)
{
	PyObject *l = PyList_New(n);
	int i;

	if (l == NULL)
		return -1;
	for (i = 0; i < n; i++) {
		PyObject *s = PyUnicode_FromString(fn(i));

		if (s == NULL || PyList_SetItem(l, i, s) != 0) {
			Py_DECREF(l);
			return -1;
		}
	}
	if (PyModule_AddObject(m, name, l) != 0) {
		Py_DECREF(l);
		return -1;
	}
	return 0;
}

static const char *
skip_name(int i)
{
	return sk_skip_reason_name((enum sk_skip_reason)i);
}

static const char *
cause_name(int i)
{
	return sk_retry_cause_name((enum sk_retry_cause)i);
}

PyMODINIT_FUNC
PyInit__shardkit(void)
{
	PyObject *m;

	if ((m = PyModule_Create(&module_def)) == NULL)
		return NULL;
	Error = PyErr_NewExceptionWithDoc("shardkit.Error", "A libshardkit "
	    "failure that no built-in exception names.", PyExc_RuntimeError,
	    NULL);
	FormatError = PyErr_NewExceptionWithDoc("shardkit.FormatError",
	    "A corrupt or truncated shard, or a bad sample under strict=True.",
	    Error, NULL);
	if (Error == NULL || FormatError == NULL)
		goto fail;
	Py_INCREF(Error);
	Py_INCREF(FormatError);
	if (PyModule_AddObject(m, "Error", Error) != 0 ||
	    PyModule_AddObject(m, "FormatError", FormatError) != 0 ||
	    add_type(m, "_Loader", &Loader_spec, &LoaderType) != 0 ||
	    add_type(m, "_Batch", &Batch_spec, &BatchType) != 0 ||
	    add_type(m, "Array", &Array_spec, &ArrayType) != 0 ||
	    add_names(m, "SKIP_REASONS", skip_name, SK_SKIP_NREASONS) != 0 ||
	    add_names(m, "RETRY_CAUSES", cause_name, SK_RETRY_NCAUSES) != 0 ||
	    PyModule_AddStringConstant(m, "LIBRARY_VERSION",
	    SK_VERSION_STRING) != 0 ||
	    PyModule_AddIntConstant(m, "MAX_BATCH", SK_LOADER_MAX_BATCH) ||
	    PyModule_AddIntConstant(m, "MAX_EPOCHS", SK_LOADER_MAX_EPOCHS) ||
	    PyModule_AddIntConstant(m, "MAX_EPOCH", SK_LOADER_MAX_EPOCH) ||
	    PyModule_AddIntConstant(m, "MAX_SHUFFLE", SK_LOADER_MAX_SHUFFLE) ||
	    PyModule_AddIntConstant(m, "MAX_WORKERS", SK_LOADER_MAX_WORKERS) ||
	    PyModule_AddIntConstant(m, "MAX_IO_STREAMS",
	    SK_LOADER_MAX_IO_STREAMS) ||
	    PyModule_AddIntConstant(m, "MAX_AHEAD", SK_LOADER_MAX_AHEAD) ||
	    PyModule_AddIntConstant(m, "MIN_RING", SK_LOADER_MIN_RING) ||
	    PyModule_AddIntConstant(m, "MAX_RING", SK_LOADER_MAX_RING) ||
	    PyModule_AddIntConstant(m, "MAX_IMAGE_SIZE",
	    SK_LOADER_MAX_IMAGE_SIZE) ||
	    PyModule_AddIntConstant(m, "MAX_RESIZE", SK_LOADER_MAX_RESIZE) ||
	    PyModule_AddIntConstant(m, "MAX_RANKS", SK_LOADER_MAX_RANKS) ||
	    PyModule_AddIntConstant(m, "MAX_CONNECTIONS",
	    SK_FETCH_MAX_CONNECTIONS) ||
	    PyModule_AddIntConstant(m, "MAX_PARTS", SK_FETCH_MAX_PARTS) ||
	    PyModule_AddIntConstant(m, "MIN_PART_SIZE", SK_FETCH_MIN_PART_SIZE) ||
	    PyModule_AddObject(m, "MAX_PART_SIZE",
	    PyLong_FromUnsignedLongLong(SK_FETCH_MAX_PART_SIZE)) ||
	    PyModule_AddObject(m, "MIN_CONNECT_TIMEOUT",
	    PyFloat_FromDouble(SK_FETCH_MIN_CONNECT_TIMEOUT)) ||
	    PyModule_AddObject(m, "MIN_STALL_TIMEOUT",
	    PyFloat_FromDouble(SK_FETCH_MIN_STALL_TIMEOUT)) ||
	    PyModule_AddObject(m, "MAX_TIMEOUT",
	    PyFloat_FromDouble(SK_FETCH_MAX_TIMEOUT)) ||
	    PyModule_AddObject(m, "MAX_RETRY_TIME",
	    PyFloat_FromDouble(SK_FETCH_MAX_RETRY_TIME)) ||
	    PyModule_AddIntConstant(m, "MAX_ATTEMPTS", SK_FETCH_MAX_ATTEMPTS) ||
	    PyModule_AddObject(m, "VERDICT_WAIT_INPUT",
	    PyFloat_FromDouble(SK_VERDICT_WAIT_INPUT)) ||
	    PyModule_AddObject(m, "VERDICT_WAIT_COMPUTE",
	    PyFloat_FromDouble(SK_VERDICT_WAIT_COMPUTE)) ||
	    PyModule_AddObject(m, "VERDICT_RATIO_INPUT",
	    PyFloat_FromDouble(SK_VERDICT_RATIO_INPUT)) ||
	    PyModule_AddObject(m, "VERDICT_RATIO_COMPUTE",
	    PyFloat_FromDouble(SK_VERDICT_RATIO_COMPUTE)) ||
	    PyModule_AddObject(m, "DEFAULT_MAX_PIXELS",
	    PyLong_FromUnsignedLongLong(SK_IMAGE_MAX_PIXELS)) ||
	    PyModule_AddObject(m, "DEFAULT_MAX_SAMPLE_BYTES",
	    PyLong_FromUnsignedLongLong(SK_SAMPLE_MAX_BYTES)))
		goto fail;
	return m;
fail:
	Py_DECREF(m);
	return NULL;
}
