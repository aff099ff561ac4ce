/*
 * overworld_shm: the BEAM side of the sidecar's shared segment (docs/sidecar.md, "The shared
 * segment (`transport` 1)"), loaded by Overworld.Sidecar.Shm.
 *
 * A segment is a file (in /dev/shm) mapped MAP_SHARED, held by a NIF resource. The functions
 * copy bytes in and out of it, plain (the file's header) or under the regions' sequence locks.
 * The library runs inside the node, so nothing it is given may crash it:
 *
 *   - every argument is checked (badarg for a term of the wrong kind, {error, bounds} for an
 *     offset or length outside the mapping, whatever the integer), before anything is written;
 *   - every access to the mapping is bounds-checked against the mapped size, and made only while
 *     the file still has that size (fstat before each call: {error, resized});
 *   - the other process may still truncate the file between that fstat and the copy: touching a
 *     mapped page past the end of its file raises SIGBUS. Every access to the mapping runs under
 *     a guard (ow_guarded): a thread-local record of the mapping being accessed and a jmp_buf;
 *     the SIGBUS handler installed at load time siglongjmp's back into the guard when the fault
 *     lies inside that mapping, and the call returns {error, resized} (or {error, fault} when
 *     the file has the mapped size again when checked right after: a page the kernel could not
 *     provide, /dev/shm full, or a file truncated and restored during the copy). Any other
 *     SIGBUS goes to the handler that was there before (or gets the default action);
 *   - a resource's mapping lives until its destructor or close/1, and close/1 waits (a
 *     read-write lock) for the copies in flight on other schedulers.
 *
 * The library pins itself in memory (RTLD_NODELETE): its SIGBUS handler must stay mapped even
 * if the module that loaded it is purged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <erl_nif.h>

/* The segment's numbers are little-endian, and the sequence words are stored natively. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "overworld_shm: the shared segment is little-endian; this target is not"
#endif

/* A segment is at most 1 GiB, and its size a multiple of 64. */
#define OW_MAX_SIZE ((uint64_t)1 << 30)
/* Every region starts with a 64-byte header: seq tick n q bytes 0 0 0. */
#define OW_REGION_HEADER 64
/* Body records (id x y vx vy r m 0) and result records (id x y 0). */
#define OW_BODY_BYTES 64
#define OW_BODY_FIELDS 7
#define OW_RESULT_BYTES 32

typedef struct {
    ErlNifRWLock *lock; /* read: an access to the mapping; write: close */
    int fd;
    unsigned char *base;
    size_t size;
    int closed;
} ow_shm;

/* Small integers without a call. A runtime stores an integer of 60 bits as an immediate term:
 * the value shifted left by 4 and the tag 0xF (erts' erl_term.h: make_small, signed_val). That is
 * not part of the NIF API, so the library uses it only after checking at load time that
 * enif_make_int64 answers exactly those terms (ow_check_small); otherwise, and for every term that
 * is not such an immediate (a bignum, anything else), the enif functions decide. */
#define OW_SMALL_TAG ((ERL_NIF_TERM)0xF)
#define OW_SMALL_MAX (((int64_t)1 << 59) - 1)
#define OW_SMALL_MIN (-((int64_t)1 << 59))
static int ow_small_ok; /* set once at load, before any call */

static inline int ow_get_i64(ErlNifEnv *env, ERL_NIF_TERM term, ErlNifSInt64 *out)
{
    if (ow_small_ok && (term & 0xF) == OW_SMALL_TAG) {
        *out = (ErlNifSInt64)((int64_t)term >> 4);
        return 1;
    }
    return enif_get_int64(env, term, out);
}

static inline ERL_NIF_TERM ow_make_i64(ErlNifEnv *env, int64_t v)
{
    if (ow_small_ok && v >= OW_SMALL_MIN && v <= OW_SMALL_MAX) {
        return ((ERL_NIF_TERM)v << 4) | OW_SMALL_TAG;
    }
    return enif_make_int64(env, v);
}

/* Whether this runtime's small integers are as ow_get_i64 and ow_make_i64 take them: for values
 * across the range and at both of its ends, enif_make_int64's term is the immediate and
 * enif_get_int64 reads it back; one past either end is not an immediate. */
static int ow_check_small(ErlNifEnv *env)
{
    static const int64_t values[] = {0, 1, -1, 15, -16, 123456789, -987654321, OW_SMALL_MAX,
                                     OW_SMALL_MIN, (int64_t)1 << 40, -((int64_t)1 << 40)};
    ErlNifSInt64 back;
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        ERL_NIF_TERM t = enif_make_int64(env, values[i]);
        if (t != (((ERL_NIF_TERM)values[i] << 4) | OW_SMALL_TAG) || ((int64_t)t >> 4) != values[i] ||
            !enif_get_int64(env, t, &back) || back != values[i]) {
            return 0;
        }
    }
    return (enif_make_int64(env, OW_SMALL_MAX + 1) & 0xF) != OW_SMALL_TAG &&
           (enif_make_int64(env, OW_SMALL_MIN - 1) & 0xF) != OW_SMALL_TAG &&
           (enif_make_atom(env, "ok") & 0xF) != OW_SMALL_TAG;
}

/* Lists and tuples without a call, in the same way. A list cell is a pointer to its two words
 * (head, tail) tagged 0x1; a tuple is a pointer tagged 0x2 to its header word (the arity shifted
 * left by 6, the low six bits 0) followed by its elements (erl_term.h: list_val, boxed_val,
 * make_arityval). ow_raw_list_cell and ow_raw_tuple read that layout; ow_get_list_cell and
 * ow_get_tuple use them only after ow_check_terms found them answering as enif_get_list_cell and
 * enif_get_tuple do for every kind of term built at load time. */
#define OW_LIST_TAG ((ERL_NIF_TERM)0x1)
#define OW_BOXED_TAG ((ERL_NIF_TERM)0x2)
static int ow_terms_ok;      /* set once at load, before any call */
static ERL_NIF_TERM ow_nil; /* the empty list, when ow_terms_ok */

/* The words a list cell or a boxed term points to: the term with its tag (low two bits) cleared. */
static inline ERL_NIF_TERM *ow_words(ERL_NIF_TERM term)
{
    return (ERL_NIF_TERM *)(uintptr_t)(term & ~(ERL_NIF_TERM)0x3);
}

static inline int ow_raw_list_cell(ERL_NIF_TERM term, ERL_NIF_TERM *head, ERL_NIF_TERM *tail)
{
    const ERL_NIF_TERM *cell = ow_words(term);
    if ((term & 0x3) != OW_LIST_TAG) {
        return 0;
    }
    *head = cell[0];
    *tail = cell[1];
    return 1;
}

static inline int ow_raw_tuple(ERL_NIF_TERM term, int *arity, const ERL_NIF_TERM **fields)
{
    const ERL_NIF_TERM *box = ow_words(term);
    if ((term & 0x3) != OW_BOXED_TAG || (box[0] & 0x3F) != 0) {
        return 0;
    }
    *arity = (int)(box[0] >> 6);
    *fields = box + 1;
    return 1;
}

static inline int ow_get_list_cell(ErlNifEnv *env, ERL_NIF_TERM term, ERL_NIF_TERM *head,
                                   ERL_NIF_TERM *tail)
{
    return ow_terms_ok ? ow_raw_list_cell(term, head, tail)
                       : enif_get_list_cell(env, term, head, tail);
}

static inline int ow_is_nil(ErlNifEnv *env, ERL_NIF_TERM term)
{
    return ow_terms_ok ? term == ow_nil : enif_is_empty_list(env, term);
}

static inline int ow_get_tuple(ErlNifEnv *env, ERL_NIF_TERM term, int *arity,
                               const ERL_NIF_TERM **fields)
{
    return ow_terms_ok ? ow_raw_tuple(term, arity, fields)
                       : enif_get_tuple(env, term, arity, fields);
}

/* Whether the raw readers answer `term` as the NIF API does: a list cell or not (and the same
 * head and tail), a tuple or not (and the same arity and elements), the empty list or not. */
static int ow_reads_alike(ErlNifEnv *env, ERL_NIF_TERM term)
{
    ERL_NIF_TERM h1, t1, h2, t2;
    const ERL_NIF_TERM *f1, *f2;
    int a1, a2;
    int cell = ow_raw_list_cell(term, &h1, &t1), enif_cell = enif_get_list_cell(env, term, &h2, &t2);
    int tuple = ow_raw_tuple(term, &a1, &f1), enif_tuple = enif_get_tuple(env, term, &a2, &f2);
    return !cell == !enif_cell && (!cell || (h1 == h2 && t1 == t2)) && !tuple == !enif_tuple &&
           (!tuple || (a1 == a2 && (a1 == 0 || f1 == f2))) &&
           (term == ow_nil) == !!enif_is_empty_list(env, term);
}

/* Whether ow_get_list_cell, ow_is_nil and ow_get_tuple may read terms themselves (above): every
 * cell of a list of three and its end, tuples of 0, 2 and 3 elements, and a map, a binary, a
 * bignum, an atom and a small integer read alike both ways, and the list's cells hold its
 * elements. */
static int ow_check_terms(ErlNifEnv *env)
{
    ERL_NIF_TERM elements[3], terms[12], head, tail;
    unsigned char *data;
    int k = 0;

    ow_nil = enif_make_list(env, 0);
    elements[0] = enif_make_int(env, 7);
    elements[1] = enif_make_atom(env, "ok");
    elements[2] = enif_make_int64(env, (ErlNifSInt64)1 << 62);
    terms[k] = enif_make_list_from_array(env, elements, 3);
    for (int i = 0; i < 3; i++, k++) {
        if (!ow_raw_list_cell(terms[k], &head, &tail) || head != elements[i]) {
            return 0;
        }
        terms[k + 1] = tail;
    }
    k++; /* (the list's end) */
    terms[k++] = enif_make_tuple_from_array(env, elements, 0);
    terms[k++] = enif_make_tuple_from_array(env, elements, 2);
    terms[k++] = enif_make_tuple_from_array(env, elements, 3);
    if (!enif_make_map_put(env, enif_make_new_map(env), elements[0], elements[1], &terms[k++]) ||
        (data = enif_make_new_binary(env, 3, &terms[k++])) == NULL) {
        return 0;
    }
    memset(data, 0, 3);
    terms[k++] = elements[2];
    terms[k++] = elements[1];
    terms[k++] = elements[0];
    if (terms[3] != ow_nil) {
        return 0;
    }
    for (int i = 0; i < k; i++) {
        if (!ow_reads_alike(env, terms[i])) {
            return 0;
        }
    }
    ow_terms_ok = 1;
    return 1;
}

static ErlNifResourceType *ow_shm_type;

static ERL_NIF_TERM atom_ok, atom_error, atom_closed, atom_bounds, atom_resized, atom_fault,
    atom_torn, atom_seq, atom_size, atom_tick, atom_count, atom_ids, atom_errno, atom_queries,
    atom_bytes;

/* ------------------------------------------------------------------------------------------ */
/* The SIGBUS guard                                                                            */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    sigjmp_buf env;
    const unsigned char *lo; /* the mapping being accessed by this thread: [lo, hi) */
    const unsigned char *hi;
} ow_guard;

/* The guard of the access this thread is making, NULL outside ow_guarded. initial-exec: the
 * signal handler reads it, and the general-dynamic model may allocate on a thread's first
 * access (not async-signal-safe). */
static __thread ow_guard *ow_active_guard __attribute__((tls_model("initial-exec")));

static struct sigaction ow_previous_sigbus;
static int ow_sigbus_installed; /* load callbacks are serialised by the runtime */

static void ow_on_sigbus(int sig, siginfo_t *info, void *context)
{
    ow_guard *guard = ow_active_guard;

    /* Ours: a fault raised by the kernel (si_code > 0, not a kill(2)) at an address inside the
     * mapping this thread is accessing. */
    if (guard != NULL && info != NULL && info->si_code > 0) {
        const unsigned char *addr = (const unsigned char *)info->si_addr;
        if (addr >= guard->lo && addr < guard->hi) {
            ow_active_guard = NULL;
            siglongjmp(guard->env, 1);
        }
    }

    /* Anyone else's: what was there before us. */
    if (ow_previous_sigbus.sa_flags & SA_SIGINFO) {
        if (ow_previous_sigbus.sa_sigaction != NULL) {
            ow_previous_sigbus.sa_sigaction(sig, info, context);
            return;
        }
    } else if (ow_previous_sigbus.sa_handler == SIG_IGN) {
        return;
    } else if (ow_previous_sigbus.sa_handler != SIG_DFL) {
        ow_previous_sigbus.sa_handler(sig);
        return;
    }
    /* The default action: reset it, then let the signal come again (a fault re-executes the
     * faulting instruction when the handler returns; a sent signal is raised again, pending
     * until the handler returns since SIGBUS is blocked while it runs). */
    {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof(dfl));
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(SIGBUS, &dfl, NULL);
        if (info == NULL || info->si_code <= 0) {
            raise(SIGBUS);
        }
    }
}

typedef void (*ow_op)(void *arg);

/* Why a guarded access failed: the file's size changed ({error, resized}), or it did not (the
 * kernel could not provide a page: {error, fault}). Called with the read lock held. */
static ERL_NIF_TERM ow_fault_reason(const ow_shm *s)
{
    struct stat st;
    if (fstat(s->fd, &st) != 0 || (uint64_t)st.st_size != (uint64_t)s->size) {
        return atom_resized;
    }
    return atom_fault;
}

/* Runs op(arg), whose every access to the mapping lies in [s->base, s->base + s->size), with
 * the read lock held. Returns 0, or when the access raised SIGBUS (op did not finish; what it
 * wrote in arg is to be ignored) the reason: ow_fault_reason's. */
static ERL_NIF_TERM __attribute__((noinline)) ow_guarded(const ow_shm *s, ow_op op, void *arg)
{
    ow_guard guard;

    guard.lo = s->base;
    guard.hi = s->base + s->size;
    if (sigsetjmp(guard.env, 0) != 0) {
        /* Back from the handler: SIGBUS is still blocked in this thread (the mask was not
         * saved, the cheap sigsetjmp): unblock it for the next fault. */
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGBUS);
        pthread_sigmask(SIG_UNBLOCK, &set, NULL);
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        ow_active_guard = NULL;
        return ow_fault_reason(s);
    }
    ow_active_guard = &guard;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    op(arg);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    ow_active_guard = NULL;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Helpers                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static ERL_NIF_TERM ow_error(ErlNifEnv *env, ERL_NIF_TERM reason)
{
    return enif_make_tuple2(env, atom_error, reason);
}

static ERL_NIF_TERM ow_errno_term(ErlNifEnv *env, int err)
{
    const char *name;
    switch (err) {
    case EACCES: name = "eacces"; break;
    case EBADF: name = "ebadf"; break;
    case EBUSY: name = "ebusy"; break;
    case EEXIST: name = "eexist"; break;
    case EFBIG: name = "efbig"; break;
    case EINTR: name = "eintr"; break;
    case EINVAL: name = "einval"; break;
    case EIO: name = "eio"; break;
    case EISDIR: name = "eisdir"; break;
    case ELOOP: name = "eloop"; break;
    case EMFILE: name = "emfile"; break;
    case ENAMETOOLONG: name = "enametoolong"; break;
    case ENFILE: name = "enfile"; break;
    case ENODEV: name = "enodev"; break;
    case ENOENT: name = "enoent"; break;
    case ENOMEM: name = "enomem"; break;
    case ENOSPC: name = "enospc"; break;
    case ENOTDIR: name = "enotdir"; break;
    case ENXIO: name = "enxio"; break;
    case EPERM: name = "eperm"; break;
    case EROFS: name = "erofs"; break;
    case ETXTBSY: name = "etxtbsy"; break;
    default: return enif_make_tuple2(env, atom_errno, enif_make_int(env, err));
    }
    return enif_make_atom(env, name);
}

enum { ARG_OK, ARG_RANGE, ARG_BAD };

/* An unsigned 64-bit argument: ARG_OK, ARG_RANGE (an integer, but negative or above 2^64 - 1),
 * or ARG_BAD (not an integer). */
static int ow_get_u64(ErlNifEnv *env, ERL_NIF_TERM term, uint64_t *out)
{
    ErlNifUInt64 value;
    *out = 0;
    if (enif_get_uint64(env, term, &value)) {
        *out = (uint64_t)value;
        return ARG_OK;
    }
    return enif_term_type(env, term) == ERL_NIF_TERM_TYPE_INTEGER ? ARG_RANGE : ARG_BAD;
}

/* A sequence number to publish from: even, and room for + 2. */
static int ow_get_seq(ErlNifEnv *env, ERL_NIF_TERM term, uint64_t *out)
{
    return ow_get_u64(env, term, out) == ARG_OK && (*out & 1) == 0 && *out <= UINT64_MAX - 2;
}

static int ow_get_shm(ErlNifEnv *env, ERL_NIF_TERM term, ow_shm **out)
{
    return enif_get_resource(env, term, ow_shm_type, (void **)out);
}

/* Whether [offset, offset + len) lies inside a mapping of `size` bytes (no overflow). */
static int ow_within(uint64_t offset, uint64_t len, uint64_t size)
{
    return offset <= size && len <= size - offset;
}

/* Takes the resource's read lock for an access. Returns 0 (locked, the mapping usable, its file
 * still the mapped size unless !check_size), or the reason (unlocked). */
static ERL_NIF_TERM ow_enter(ow_shm *s, int check_size)
{
    enif_rwlock_rlock(s->lock);
    if (s->closed) {
        enif_rwlock_runlock(s->lock);
        return atom_closed;
    }
    if (check_size) {
        struct stat st;
        if (fstat(s->fd, &st) != 0 || (uint64_t)st.st_size != (uint64_t)s->size) {
            enif_rwlock_runlock(s->lock);
            return atom_resized;
        }
    }
    return 0;
}

/* Ends an access that failed: the read lock released, {error, Reason}. */
static ERL_NIF_TERM ow_leave_error(ErlNifEnv *env, ow_shm *s, ERL_NIF_TERM reason)
{
    enif_rwlock_runlock(s->lock);
    return ow_error(env, reason);
}

/* Tells the scheduler how much of its time slice (1 ms) a long call took. */
static void ow_account(ErlNifEnv *env, ErlNifTime start)
{
    ErlNifTime us = enif_monotonic_time(ERL_NIF_USEC) - start;
    if (us >= 10) {
        int percent = us >= 1000 ? 100 : (int)(us / 10);
        enif_consume_timeslice(env, percent);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Guarded operations                                                                          */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    unsigned char *dst;
    const unsigned char *src;
    size_t len;
} ow_copy_arg;

static void ow_op_copy(void *p)
{
    ow_copy_arg *a = p;
    memcpy(a->dst, a->src, a->len);
}

typedef struct {
    uint64_t *seq_word;     /* the region's first word */
    uint64_t seq;           /* its current (even) value */
    unsigned char *header;  /* region + 8 */
    const unsigned char *header_src;
    size_t header_len;      /* <= 56, the rest zeroed */
    unsigned char *records; /* region + 64 */
    const unsigned char *records_src;
    size_t records_len;
    int stale; /* out: the region's seq was not `seq` (nothing written) */
} ow_publish_arg;

/* The writer's side of the sequence lock (docs/sidecar.md). */
static void ow_op_publish(void *p)
{
    ow_publish_arg *a = p;
    if (__atomic_load_n(a->seq_word, __ATOMIC_RELAXED) != a->seq) {
        a->stale = 1;
        return;
    }
    a->stale = 0;
    __atomic_store_n(a->seq_word, a->seq + 1, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    memcpy(a->header, a->header_src, a->header_len);
    memset(a->header + a->header_len, 0, OW_REGION_HEADER - 8 - a->header_len);
    if (a->records_len > 0) {
        memcpy(a->records, a->records_src, a->records_len);
    }
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(a->seq_word, a->seq + 2, __ATOMIC_RELEASE);
}

typedef struct {
    const uint64_t *seq_word;
    const unsigned char *src; /* the region, seq word included */
    unsigned char *dst;
    size_t len;
    uint64_t expected;
    ERL_NIF_TERM result; /* out: 0 (a good copy), atom_torn or atom_seq */
} ow_consume_arg;

/* The reader's side of the sequence lock. */
static void ow_op_consume(void *p)
{
    ow_consume_arg *a = p;
    uint64_t before = __atomic_load_n(a->seq_word, __ATOMIC_ACQUIRE);
    if (before & 1) {
        a->result = atom_torn;
        return;
    }
    if (before != a->expected) {
        a->result = atom_seq;
        return;
    }
    memcpy(a->dst, a->src, a->len);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    a->result = __atomic_load_n(a->seq_word, __ATOMIC_RELAXED) == before ? 0 : atom_torn;
}

/* Copies the first `len` bytes of the region at `region` (checked to lie in the mapping; its
 * seq word included) to `dst` under its sequence lock, expecting `expected`. Called with the
 * read lock held. Returns 0, or the reason: a fault's (ow_guarded), torn or seq. */
static ERL_NIF_TERM ow_consume(const ow_shm *s, uint64_t region, uint64_t expected,
                               unsigned char *dst, size_t len)
{
    ow_consume_arg arg;
    ERL_NIF_TERM reason;
    arg.seq_word = (const uint64_t *)(const void *)(s->base + region);
    arg.src = s->base + region;
    arg.dst = dst;
    arg.len = len;
    arg.expected = expected;
    arg.result = atom_seq;
    reason = ow_guarded(s, ow_op_consume, &arg);
    return reason != 0 ? reason : arg.result;
}

typedef struct {
    const unsigned char *results; /* n result records (a copy) */
    const unsigned char *bodies;  /* n body records (in the mapping) */
    size_t n;
    int same; /* out */
} ow_ids_arg;

/* Whether the results' ids are the bodies' (our own request region: nobody else writes it). */
static void ow_op_same_ids(void *p)
{
    ow_ids_arg *a = p;
    for (size_t i = 0; i < a->n; i++) {
        uint64_t r, b;
        memcpy(&r, a->results + i * OW_RESULT_BYTES, 8);
        memcpy(&b, a->bodies + i * OW_BODY_BYTES, 8);
        if (r != b) {
            a->same = 0;
            return;
        }
    }
    a->same = 1;
}

/* ------------------------------------------------------------------------------------------ */
/* NIFs                                                                                        */
/* ------------------------------------------------------------------------------------------ */

/* create(Path :: binary, Size) -> {ok, Ref} | {error, Reason} */
static ERL_NIF_TERM nif_create(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ErlNifBinary path_bin;
    char path[PATH_MAX];
    uint64_t size;
    int fd, err;
    void *base;
    ow_shm *s;
    ERL_NIF_TERM term;

    (void)argc;
    if (!enif_inspect_binary(env, argv[0], &path_bin) || path_bin.size == 0 ||
        path_bin.size >= sizeof(path) || memchr(path_bin.data, 0, path_bin.size) != NULL) {
        return enif_make_badarg(env);
    }
    switch (ow_get_u64(env, argv[1], &size)) {
    case ARG_BAD: return enif_make_badarg(env);
    case ARG_RANGE: return ow_error(env, atom_size);
    default: break;
    }
    if (size == 0 || size % 64 != 0 || size > OW_MAX_SIZE) {
        return ow_error(env, atom_size);
    }
    memcpy(path, path_bin.data, path_bin.size);
    path[path_bin.size] = '\0';

    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        return ow_error(env, ow_errno_term(env, errno));
    }
    if (ftruncate(fd, (off_t)size) != 0) {
        err = errno;
        close(fd);
        return ow_error(env, ow_errno_term(env, err));
    }
    base = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        err = errno;
        close(fd);
        return ow_error(env, ow_errno_term(env, err));
    }
    s = enif_alloc_resource(ow_shm_type, sizeof(ow_shm));
    if (s == NULL) {
        munmap(base, (size_t)size);
        close(fd);
        return ow_error(env, ow_errno_term(env, ENOMEM));
    }
    s->fd = fd;
    s->base = base;
    s->size = (size_t)size;
    s->closed = 0;
    s->lock = enif_rwlock_create("overworld_shm");
    if (s->lock == NULL) {
        /* The destructor unmaps and closes. */
        enif_release_resource(s);
        return ow_error(env, ow_errno_term(env, ENOMEM));
    }
    term = enif_make_resource(env, s);
    enif_release_resource(s);
    return enif_make_tuple2(env, atom_ok, term);
}

static void ow_unmap(ow_shm *s)
{
    if (!s->closed) {
        munmap(s->base, s->size);
        close(s->fd);
        s->closed = 1;
        s->base = NULL;
        s->fd = -1;
    }
}

static void ow_shm_destructor(ErlNifEnv *env, void *obj)
{
    ow_shm *s = obj;
    (void)env;
    ow_unmap(s); /* no reference left: no access in flight */
    if (s->lock != NULL) {
        enif_rwlock_destroy(s->lock);
    }
}

/* close(Ref) -> ok */
static ERL_NIF_TERM nif_close(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ow_shm *s;
    (void)argc;
    if (!ow_get_shm(env, argv[0], &s)) {
        return enif_make_badarg(env);
    }
    enif_rwlock_rwlock(s->lock);
    ow_unmap(s);
    enif_rwlock_rwunlock(s->lock);
    return atom_ok;
}

/* size(Ref) -> {ok, MappedSize, FileSize} | {error, closed | Errno} */
static ERL_NIF_TERM nif_size(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ow_shm *s;
    struct stat st;
    ERL_NIF_TERM reason, result;
    (void)argc;
    if (!ow_get_shm(env, argv[0], &s)) {
        return enif_make_badarg(env);
    }
    if ((reason = ow_enter(s, 0)) != 0) {
        return ow_error(env, reason);
    }
    if (fstat(s->fd, &st) != 0) {
        result = ow_error(env, ow_errno_term(env, errno));
    } else {
        result = enif_make_tuple3(env, atom_ok, enif_make_uint64(env, s->size),
                                  enif_make_int64(env, (ErlNifSInt64)st.st_size));
    }
    enif_rwlock_runlock(s->lock);
    return result;
}

/* write(Ref, Offset, IoData) -> ok | {error, bounds | resized | fault | closed} */
static ERL_NIF_TERM nif_write(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ow_shm *s;
    uint64_t offset = 0;
    int offset_arg;
    ErlNifBinary data;
    ERL_NIF_TERM reason;
    ow_copy_arg copy;
    ErlNifTime start;

    (void)argc;
    if (!ow_get_shm(env, argv[0], &s)) {
        return enif_make_badarg(env);
    }
    offset_arg = ow_get_u64(env, argv[1], &offset);
    if (offset_arg == ARG_BAD || !enif_inspect_iolist_as_binary(env, argv[2], &data)) {
        return enif_make_badarg(env);
    }
    start = enif_monotonic_time(ERL_NIF_USEC);
    if ((reason = ow_enter(s, 1)) != 0) {
        return ow_error(env, reason);
    }
    if (offset_arg != ARG_OK || !ow_within(offset, data.size, s->size)) {
        return ow_leave_error(env, s, atom_bounds);
    }
    copy.dst = s->base + offset;
    copy.src = data.data;
    copy.len = data.size;
    if ((reason = ow_guarded(s, ow_op_copy, &copy)) != 0) {
        return ow_leave_error(env, s, reason);
    }
    enif_rwlock_runlock(s->lock);
    ow_account(env, start);
    return atom_ok;
}

/* read(Ref, Offset, Len) -> {ok, Binary} | {error, ...}; check_size = 0: __read_unchecked__ */
static ERL_NIF_TERM ow_read(ErlNifEnv *env, const ERL_NIF_TERM argv[], int check_size)
{
    ow_shm *s;
    uint64_t offset = 0, len = 0;
    int offset_arg, len_arg;
    ERL_NIF_TERM reason, bin;
    ow_copy_arg copy;
    ErlNifTime start;

    if (!ow_get_shm(env, argv[0], &s)) {
        return enif_make_badarg(env);
    }
    offset_arg = ow_get_u64(env, argv[1], &offset);
    len_arg = ow_get_u64(env, argv[2], &len);
    if (offset_arg == ARG_BAD || len_arg == ARG_BAD) {
        return enif_make_badarg(env);
    }
    start = enif_monotonic_time(ERL_NIF_USEC);
    if ((reason = ow_enter(s, check_size)) != 0) {
        return ow_error(env, reason);
    }
    if (offset_arg != ARG_OK || len_arg != ARG_OK || !ow_within(offset, len, s->size)) {
        return ow_leave_error(env, s, atom_bounds);
    }
    copy.dst = enif_make_new_binary(env, (size_t)len, &bin);
    copy.src = s->base + offset;
    copy.len = (size_t)len;
    if (copy.dst == NULL) {
        return ow_leave_error(env, s, ow_errno_term(env, ENOMEM));
    }
    if ((reason = ow_guarded(s, ow_op_copy, &copy)) != 0) {
        return ow_leave_error(env, s, reason);
    }
    enif_rwlock_runlock(s->lock);
    ow_account(env, start);
    return enif_make_tuple2(env, atom_ok, bin);
}

static ERL_NIF_TERM nif_read(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return ow_read(env, argv, 1);
}

/* For the tests: read/3 without the fstat check, so that a truncated file faults. */
static ERL_NIF_TERM nif_read_unchecked(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    (void)argc;
    return ow_read(env, argv, 0);
}

/* Publishes under the region's sequence lock: records_len bytes of records (already checked to
 * fit) and header_len (<= 56) bytes of header words. Returns 0 (ok) or the error reason. */
static ERL_NIF_TERM ow_publish(ow_shm *s, uint64_t region, uint64_t seq,
                               const unsigned char *header, size_t header_len,
                               const unsigned char *records, size_t records_len)
{
    ow_publish_arg arg;
    ERL_NIF_TERM reason;
    arg.seq_word = (uint64_t *)(void *)(s->base + region);
    arg.seq = seq;
    arg.header = s->base + region + 8;
    arg.header_src = header;
    arg.header_len = header_len;
    arg.records = s->base + region + OW_REGION_HEADER;
    arg.records_src = records;
    arg.records_len = records_len;
    arg.stale = 0;
    reason = ow_guarded(s, ow_op_publish, &arg);
    return reason != 0 ? reason : arg.stale ? atom_seq : 0;
}

/* publish(Ref, RegionOffset, Seq, Header, Records) -> ok | {error, ...} */
static ERL_NIF_TERM nif_publish(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ow_shm *s;
    uint64_t region = 0, seq = 0;
    int region_arg;
    ErlNifBinary header, records;
    ERL_NIF_TERM reason;
    ErlNifTime start;

    (void)argc;
    if (!ow_get_shm(env, argv[0], &s)) {
        return enif_make_badarg(env);
    }
    region_arg = ow_get_u64(env, argv[1], &region);
    if (region_arg == ARG_BAD || !ow_get_seq(env, argv[2], &seq) ||
        !enif_inspect_iolist_as_binary(env, argv[3], &header) ||
        header.size > OW_REGION_HEADER - 8 ||
        !enif_inspect_iolist_as_binary(env, argv[4], &records)) {
        return enif_make_badarg(env);
    }
    start = enif_monotonic_time(ERL_NIF_USEC);
    if ((reason = ow_enter(s, 1)) != 0) {
        return ow_error(env, reason);
    }
    if (region_arg != ARG_OK || region % 64 != 0 ||
        !ow_within(region, OW_REGION_HEADER, s->size) ||
        !ow_within(region + OW_REGION_HEADER, records.size, s->size)) {
        return ow_leave_error(env, s, atom_bounds);
    }
    reason = ow_publish(s, region, seq, header.data, header.size, records.data, records.size);
    enif_rwlock_runlock(s->lock);
    ow_account(env, start);
    return reason != 0 ? ow_error(env, reason) : atom_ok;
}

/* A body's 64-byte record: its 7 numbers (id x y vx vy r m), little-endian, and a zero. */
static void ow_put_body(int64_t *record, const ErlNifSInt64 v[OW_BODY_FIELDS])
{
    for (int f = 0; f < OW_BODY_FIELDS; f++) {
        record[f] = (int64_t)htole64((uint64_t)v[f]);
    }
    record[OW_BODY_FIELDS] = 0;
}

/* The arguments publish_bodies and publish_entities share: Ref, RegionOffset, RegionLen, Seq,
 * Tick. */
typedef struct {
    ow_shm *s;
    uint64_t region, region_len, seq;
    ErlNifSInt64 tick;
    int in_bounds; /* 0: an offset or length not a u64, a region not a multiple of 64, or shorter
                    * than its header: out of bounds, whatever it holds */
} ow_request;

/* Decodes them: 1, or 0 (badarg). */
static int ow_request_args(ErlNifEnv *env, const ERL_NIF_TERM argv[], ow_request *r)
{
    int region_arg, region_len_arg;
    if (!ow_get_shm(env, argv[0], &r->s)) {
        return 0;
    }
    region_arg = ow_get_u64(env, argv[1], &r->region);
    region_len_arg = ow_get_u64(env, argv[2], &r->region_len);
    if (region_arg == ARG_BAD || region_len_arg == ARG_BAD || !ow_get_seq(env, argv[3], &r->seq) ||
        !enif_get_int64(env, argv[4], &r->tick)) {
        return 0;
    }
    r->in_bounds = region_arg == ARG_OK && region_len_arg == ARG_OK && r->region % 64 == 0 &&
                   r->region_len >= OW_REGION_HEADER;
    return 1;
}

/* How many body records the request's region holds (the mapping is checked under the lock). */
static uint64_t ow_capacity(const ow_request *r)
{
    return r->in_bounds ? (r->region_len - OW_REGION_HEADER) / OW_BODY_BYTES : 0;
}

/* A publish's records, decoded before anything is written: in the calling thread's scratch
 * buffer, which grows (doubling) as records come, up to the request's capacity, and is kept for
 * the thread's next publish (a scheduler's buffer is as large as the largest request it wrote). */
static __thread int64_t *ow_scratch __attribute__((tls_model("initial-exec")));
static __thread uint64_t ow_scratch_room __attribute__((tls_model("initial-exec"))); /* records */

typedef struct {
    uint64_t n;        /* records written */
    uint64_t capacity; /* records the request's region holds */
    int over;          /* out: a record past the capacity was asked for */
    int nomem;         /* out: the buffer could not grow */
} ow_sink;

static int ow_grow(ow_sink *k)
{
    uint64_t room = ow_scratch_room < 512 ? 1024 : 2 * ow_scratch_room;
    void *grown;
    if (k->n >= k->capacity) {
        k->over = 1;
        return 0;
    }
    room = room > k->capacity ? k->capacity : room;
    grown = ow_scratch == NULL ? enif_alloc((size_t)room * OW_BODY_BYTES)
                               : enif_realloc(ow_scratch, (size_t)room * OW_BODY_BYTES);
    if (grown == NULL) {
        k->nomem = 1;
        return 0;
    }
    ow_scratch = grown;
    ow_scratch_room = room;
    return 1;
}

/* The next record to write (OW_BODY_BYTES / 8 words), or NULL (k->over or k->nomem set). */
static inline int64_t *ow_next_record(ow_sink *k)
{
    if (k->n >= ow_scratch_room || k->n >= k->capacity) {
        if (!ow_grow(k)) {
            return NULL;
        }
    }
    return ow_scratch + (k->n++) * (OW_BODY_BYTES / 8);
}

/* Why a sink refused a record: {error, bounds} past the capacity, else {error, enomem}. */
static ERL_NIF_TERM ow_sink_error(ErlNifEnv *env, const ow_sink *k)
{
    return k->over ? ow_error(env, atom_bounds) : ow_error(env, ow_errno_term(env, ENOMEM));
}

/* Writes the body records of a term with ow_next_record: 1, or 0 when a body is not what it must
 * be (badarg) or the sink refused a record (k->over, k->nomem). */
typedef int (*ow_decode_fn)(ErlNifEnv *env, ERL_NIF_TERM term, const void *ctx, ow_sink *k);

/* The end of publish_bodies and publish_entities: the bodies of `term` (decode), then the q
 * query records of `queries` (64 bytes each, as they are), published in the request's region
 * with the header tick n q 64(n+q), {ok, N}. {error, bounds} when they do not fit; every body
 * decoded (and checked) before anything is written. */
static ERL_NIF_TERM ow_publish_records(ErlNifEnv *env, const ow_request *r, ow_decode_fn decode,
                                       ERL_NIF_TERM term, const void *ctx,
                                       const ErlNifBinary *queries)
{
    int64_t header[4];
    ERL_NIF_TERM reason;
    ErlNifTime start;
    ow_sink k = {0, ow_capacity(r), 0, 0};
    uint64_t n, q = queries->size / OW_BODY_BYTES;

    if (!r->in_bounds) {
        return ow_error(env, atom_bounds);
    }
    start = enif_monotonic_time(ERL_NIF_USEC);
    if (!decode(env, term, ctx, &k)) {
        return k.over || k.nomem ? ow_sink_error(env, &k) : enif_make_badarg(env);
    }
    n = k.n;
    for (uint64_t i = 0; i < q; i++) {
        int64_t *record = ow_next_record(&k);
        if (record == NULL) {
            return ow_sink_error(env, &k);
        }
        memcpy(record, queries->data + i * OW_BODY_BYTES, OW_BODY_BYTES);
    }
    header[0] = (int64_t)htole64((uint64_t)r->tick);
    header[1] = (int64_t)htole64(n);
    header[2] = (int64_t)htole64(q);
    header[3] = (int64_t)htole64(k.n * OW_BODY_BYTES);

    if ((reason = ow_enter(r->s, 1)) != 0) {
        return ow_error(env, reason);
    }
    if (!ow_within(r->region, r->region_len, r->s->size)) {
        reason = atom_bounds;
    } else {
        reason = ow_publish(r->s, r->region, r->seq, (const unsigned char *)header, sizeof(header),
                            (const unsigned char *)ow_scratch, (size_t)k.n * OW_BODY_BYTES);
    }
    enif_rwlock_runlock(r->s->lock);
    ow_account(env, start);
    if (reason != 0) {
        return ow_error(env, reason);
    }
    return enif_make_tuple2(env, atom_ok, enif_make_uint64(env, n));
}

/* The Queries argument of publish_bodies/7 and publish_entities/8 (a binary of 64-byte query
 * records), or none: 1, or 0 (badarg). */
static int ow_queries_arg(ErlNifEnv *env, int argc, int at, const ERL_NIF_TERM argv[],
                          ErlNifBinary *queries)
{
    if (argc <= at) {
        queries->size = 0;
        queries->data = NULL;
        return 1;
    }
    return enif_inspect_binary(env, argv[at], queries) && queries->size % OW_BODY_BYTES == 0;
}

/* publish_bodies' bodies: a proper list of {Id, X, Y, Vx, Vy, R, M}. */
static int ow_decode_bodies(ErlNifEnv *env, ERL_NIF_TERM list, const void *ctx, ow_sink *k)
{
    ERL_NIF_TERM head;
    (void)ctx;
    while (ow_get_list_cell(env, list, &head, &list)) {
        const ERL_NIF_TERM *fields;
        ErlNifSInt64 v[OW_BODY_FIELDS];
        int64_t *record;
        int arity, f;
        if (!ow_get_tuple(env, head, &arity, &fields) || arity != OW_BODY_FIELDS) {
            return 0;
        }
        for (f = 0; f < OW_BODY_FIELDS; f++) {
            if (!ow_get_i64(env, fields[f], &v[f])) {
                return 0;
            }
        }
        if ((record = ow_next_record(k)) == NULL) {
            return 0;
        }
        ow_put_body(record, v);
    }
    return ow_is_nil(env, list);
}

/* publish_bodies(Ref, RegionOffset, RegionLen, Seq, Tick, Bodies[, Queries])
 *   -> {ok, N} | {error, ...} */
static ERL_NIF_TERM nif_publish_bodies(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ow_request r;
    ErlNifBinary queries;

    if (!ow_request_args(env, argv, &r) || !enif_is_list(env, argv[5]) ||
        !ow_queries_arg(env, argc, 6, argv, &queries)) {
        return enif_make_badarg(env);
    }
    return ow_publish_records(env, &r, ow_decode_bodies, argv[5], NULL, &queries);
}

/* What publish_entities reads of an entity: the 0-based positions of its id, x, y, vx, vy
 * (v[0..4]), the zone's radius and mass (v[5], v[6]) and velocity limit (v[7]); `need`, the
 * arity an entity must have at least. */
typedef struct {
    ErlNifSInt64 v[8];
    int need;
} ow_entity_spec;

/* A hint that the `bytes` bytes of the term's data will be read soon: the address a boxed term or
 * a list cell points to (its tag bits cleared). A prefetch never faults, whatever the address, so
 * nothing depends on the term being boxed. */
static inline void ow_prefetch(ERL_NIF_TERM term, size_t bytes)
{
    const char *at = (const char *)ow_words(term);
    for (size_t b = 0; b < bytes; b += 64) {
        __builtin_prefetch(at + b);
    }
    __builtin_prefetch(at + bytes - 1);
}

/* How far ahead of the entity being taken the walk runs (its entities prefetched). */
#define OW_AHEAD 8

/* A walk over the entities of cells ([{Key, [Entity]}]), one after another. Walking the lists is
 * a chain of dependent loads, so the walk runs OW_AHEAD entities ahead of the one it gives, their
 * first `bytes` bytes prefetched: the walk's misses overlap the work on the entities given
 * instead of adding to it. */
typedef struct {
    ERL_NIF_TERM cells; /* the cells not entered yet */
    ERL_NIF_TERM list;  /* the rest of the current cell's entities */
    int bad;            /* out: the cells are not a proper list of {Key, [Entity]} pairs */
    size_t bytes;
    ERL_NIF_TERM ahead[OW_AHEAD]; /* the entities walked and not given yet: a ring */
    unsigned first, count;
} ow_walk;

/* The next entity of the lists into *entity: 1, or 0 at the end of the cells or when they are
 * malformed (w->bad). */
static inline int ow_walk_step(ErlNifEnv *env, ow_walk *w, ERL_NIF_TERM *entity)
{
    for (;;) {
        ERL_NIF_TERM cell;
        const ERL_NIF_TERM *pair;
        int arity;
        if (ow_get_list_cell(env, w->list, entity, &w->list)) {
            return 1;
        }
        if (!ow_is_nil(env, w->list)) {
            return (w->bad = 1, 0);
        }
        if (!ow_get_list_cell(env, w->cells, &cell, &w->cells)) {
            w->bad = !ow_is_nil(env, w->cells);
            return 0;
        }
        if (!ow_get_tuple(env, cell, &arity, &pair) || arity != 2) {
            return (w->bad = 1, 0);
        }
        w->list = pair[1];
    }
}

/* One more entity walked into the ring (prefetched), unless the lists are at their end. */
static inline void ow_walk_fill(ErlNifEnv *env, ow_walk *w)
{
    ERL_NIF_TERM *slot = &w->ahead[(w->first + w->count) % OW_AHEAD];
    if (!w->bad && ow_walk_step(env, w, slot)) {
        ow_prefetch(*slot, w->bytes);
        w->count++;
    }
}

static void ow_walk_start(ErlNifEnv *env, ow_walk *w, ERL_NIF_TERM cells, size_t bytes)
{
    w->cells = cells;
    w->list = enif_make_list(env, 0);
    w->bad = 0;
    w->bytes = bytes;
    w->first = 0;
    w->count = 0;
    for (int i = 0; i < OW_AHEAD; i++) {
        ow_walk_fill(env, w);
    }
}

/* The next entity into *entity: 1, or 0 at the end of the cells or when they are malformed
 * (w->bad). */
static inline int ow_walk_next(ErlNifEnv *env, ow_walk *w, ERL_NIF_TERM *entity)
{
    if (w->count == 0) {
        return 0;
    }
    *entity = w->ahead[w->first];
    w->first = (w->first + 1) % OW_AHEAD;
    w->count--;
    ow_walk_fill(env, w);
    return 1;
}

/* The largest tuple position a spec names, plus one (and the largest entity consume_moved
 * copies: a tuple's arity). */
#define OW_MAX_ARITY 256

/* v limited to [-limit, limit]. */
static inline ErlNifSInt64 ow_clamp(ErlNifSInt64 v, ErlNifSInt64 limit)
{
    return v > limit ? limit : v < -limit ? -limit : v;
}

/* Tuple positions (0-based) from the first k elements of a spec tuple's `fields` into at[]:
 * each an integer in 0..OW_MAX_ARITY - 1. *need: the arity a tuple needs for all of them.
 * Returns 1, or 0 (badarg). */
static int ow_get_positions(ErlNifEnv *env, const ERL_NIF_TERM *fields, int k, ErlNifSInt64 *at,
                            int *need)
{
    *need = 0;
    for (int f = 0; f < k; f++) {
        if (!enif_get_int64(env, fields[f], &at[f]) || at[f] < 0 || at[f] >= OW_MAX_ARITY) {
            return 0;
        }
        *need = at[f] + 1 > *need ? (int)at[f] + 1 : *need;
    }
    return 1;
}

/* publish_entities' cells: a proper list of {Key, Entities}, Entities a proper list of entities.
 * One walk: each entity's record written as it is read. */
static int ow_decode_entities(ErlNifEnv *env, ERL_NIF_TERM cells, const void *ctx, ow_sink *k)
{
    const ow_entity_spec *spec = ctx;
    const ErlNifSInt64 limit = spec->v[7];
    ow_walk w;
    ERL_NIF_TERM head;
    /* (The tuple's header and its elements up to the last the spec names.) */
    ow_walk_start(env, &w, cells, 8 * (size_t)(spec->need + 1));
    while (ow_walk_next(env, &w, &head)) {
        const ERL_NIF_TERM *fields;
        ErlNifSInt64 id, x, y, vx, vy;
        int64_t *record;
        int arity;
        if (!ow_get_tuple(env, head, &arity, &fields) || arity < spec->need ||
            !ow_get_i64(env, fields[spec->v[0]], &id) || !ow_get_i64(env, fields[spec->v[1]], &x) ||
            !ow_get_i64(env, fields[spec->v[2]], &y) ||
            !ow_get_i64(env, fields[spec->v[3]], &vx) ||
            !ow_get_i64(env, fields[spec->v[4]], &vy) || (record = ow_next_record(k)) == NULL) {
            return 0;
        }
        /* (Scalars straight into the record: no array read back as wider words.) */
        record[0] = (int64_t)htole64((uint64_t)id);
        record[1] = (int64_t)htole64((uint64_t)x);
        record[2] = (int64_t)htole64((uint64_t)y);
        record[3] = (int64_t)htole64((uint64_t)ow_clamp(vx, limit));
        record[4] = (int64_t)htole64((uint64_t)ow_clamp(vy, limit));
        record[5] = (int64_t)htole64((uint64_t)spec->v[5]);
        record[6] = (int64_t)htole64((uint64_t)spec->v[6]);
        record[7] = 0;
    }
    return !w.bad;
}

/* publish_entities(Ref, RegionOffset, RegionLen, Seq, Tick, Cells, Spec[, Queries])
 *   -> {ok, N} | {error, ...}
 *
 * publish_bodies of the entities of Cells ([{Key, [Entity]}], in order) read where they are: an
 * entity is a tuple whose elements IdI, XI, YI, VxI, VyI (0-based) are its id, position and
 * velocity, and every entity is a body of radius R and mass M, its velocity limited to
 * [-MaxSpeed, MaxSpeed] per axis. Spec = {IdI, XI, YI, VxI, VyI, R, M, MaxSpeed}. */
static ERL_NIF_TERM nif_publish_entities(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ow_request r;
    ow_entity_spec spec;
    const ERL_NIF_TERM *fields;
    ErlNifBinary queries;
    int arity, f;

    if (!ow_request_args(env, argv, &r) || !ow_get_tuple(env, argv[6], &arity, &fields) ||
        arity != 8 || !enif_is_list(env, argv[5]) || !ow_queries_arg(env, argc, 7, argv, &queries)) {
        return enif_make_badarg(env);
    }
    /* The five positions, then the radius, mass and velocity limit (at least 0). */
    if (!ow_get_positions(env, fields, 5, spec.v, &spec.need)) {
        return enif_make_badarg(env);
    }
    for (f = 5; f < 8; f++) {
        if (!enif_get_int64(env, fields[f], &spec.v[f]) || spec.v[f] < 0) {
            return enif_make_badarg(env);
        }
    }
    return ow_publish_records(env, &r, ow_decode_entities, argv[5], &spec, &queries);
}

/* consume(Ref, RegionOffset, ExpectedSeq, Len) -> {ok, Binary} | {error, ...} */
static ERL_NIF_TERM nif_consume(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    ow_shm *s;
    uint64_t region = 0, expected = 0, len = 0;
    int region_arg, len_arg;
    ERL_NIF_TERM reason, bin;
    unsigned char *dst;
    ErlNifTime start;

    (void)argc;
    if (!ow_get_shm(env, argv[0], &s)) {
        return enif_make_badarg(env);
    }
    region_arg = ow_get_u64(env, argv[1], &region);
    len_arg = ow_get_u64(env, argv[3], &len);
    if (region_arg == ARG_BAD || len_arg == ARG_BAD ||
        ow_get_u64(env, argv[2], &expected) != ARG_OK) {
        return enif_make_badarg(env);
    }
    start = enif_monotonic_time(ERL_NIF_USEC);
    if ((reason = ow_enter(s, 1)) != 0) {
        return ow_error(env, reason);
    }
    if (region_arg != ARG_OK || len_arg != ARG_OK || region % 64 != 0 || len < 8 ||
        !ow_within(region, len, s->size)) {
        return ow_leave_error(env, s, atom_bounds);
    }
    dst = enif_make_new_binary(env, (size_t)len, &bin);
    if (dst == NULL) {
        return ow_leave_error(env, s, ow_errno_term(env, ENOMEM));
    }
    reason = ow_consume(s, region, expected, dst, (size_t)len);
    enif_rwlock_runlock(s->lock);
    ow_account(env, start);
    return reason != 0 ? ow_error(env, reason) : enif_make_tuple2(env, atom_ok, bin);
}

/* The checked copy of an answer region's N result records and the answers to its Q path
 * queries, the part consume_results and consume_moved share: argv is Ref, RegionOffset,
 * RegionLen, ExpectedSeq, ExpectedTick, N; with `ids_region` (argv[6], or NULL) the results' ids
 * must be those of the first N body records of that request region, in order; `q_arg` (or NULL:
 * 0) is Q. The header's q must be Q, and its `bytes` 32N without queries, at least 32N with them
 * (the path answers follow the results). Returns 1 with *out (enif_alloc'd, the caller frees it:
 * the region's header, the records, the path answers), *n_out, *paths_len (the path answers'
 * bytes) and *start (when the access began), or 0 with the term to answer in *answer: badarg or
 * {error, ...}. (Not a term for both: badarg's term may be 0.) */
static int ow_results(ErlNifEnv *env, const ERL_NIF_TERM argv[],
                      const ERL_NIF_TERM *ids_region_arg, const ERL_NIF_TERM *q_arg,
                      unsigned char **out, uint64_t *n_out, uint64_t *paths_len,
                      ErlNifTime *start, ERL_NIF_TERM *answer)
{
    ow_shm *s;
    uint64_t region = 0, region_len = 0, expected = 0, n = 0, header_tick, header_n;
    int region_arg, region_len_arg, n_arg;
    ErlNifSInt64 tick;
    unsigned char *buffer;
    size_t len;
    ERL_NIF_TERM reason;
    uint64_t word, ids_region = 0, q = 0, bytes, header_q, header_bytes;
    int ids_arg = ARG_OK, ids_wrong = 0;

    if (!ow_get_shm(env, argv[0], &s)) {
        *answer = enif_make_badarg(env);
        return 0;
    }
    region_arg = ow_get_u64(env, argv[1], &region);
    region_len_arg = ow_get_u64(env, argv[2], &region_len);
    n_arg = ow_get_u64(env, argv[5], &n);
    if (ids_region_arg != NULL) {
        ids_arg = ow_get_u64(env, *ids_region_arg, &ids_region);
    }
    if (region_arg == ARG_BAD || region_len_arg == ARG_BAD || n_arg == ARG_BAD ||
        ids_arg == ARG_BAD || ow_get_u64(env, argv[3], &expected) != ARG_OK ||
        !enif_get_int64(env, argv[4], &tick) ||
        (q_arg != NULL && ow_get_u64(env, *q_arg, &q) != ARG_OK)) {
        *answer = enif_make_badarg(env);
        return 0;
    }
    if (region_arg != ARG_OK || region_len_arg != ARG_OK || n_arg != ARG_OK ||
        ids_arg != ARG_OK || region % 64 != 0 || ids_region % 64 != 0 ||
        region_len < OW_REGION_HEADER ||
        n > (region_len - OW_REGION_HEADER) / OW_RESULT_BYTES) {
        *answer = ow_error(env, atom_bounds);
        return 0;
    }
    *start = enif_monotonic_time(ERL_NIF_USEC);
    if ((reason = ow_enter(s, 1)) != 0) {
        *answer = ow_error(env, reason);
        return 0;
    }
    /* (The region in the mapping before the copy's buffer is allocated: n is bounded by it.) */
    if (!ow_within(region, region_len, s->size) ||
        (ids_region_arg != NULL &&
         !ow_within(ids_region, OW_REGION_HEADER + n * OW_BODY_BYTES, s->size))) {
        *answer = ow_leave_error(env, s, atom_bounds);
        return 0;
    }
    /* With path answers, their length is the header's `bytes`: the header first (under the
     * lock), then the header and everything it announces (under the lock again, the same seq:
     * the same write). */
    bytes = n * OW_RESULT_BYTES;
    if (q > 0) {
        unsigned char head[OW_REGION_HEADER];
        if ((reason = ow_consume(s, region, expected, head, sizeof(head))) != 0) {
            *answer = ow_leave_error(env, s, reason);
            return 0;
        }
        memcpy(&word, head + 32, 8);
        bytes = le64toh(word);
        if (bytes < n * OW_RESULT_BYTES || bytes > region_len - OW_REGION_HEADER || bytes % 8 != 0) {
            *answer = ow_leave_error(env, s, enif_make_tuple2(env, atom_bytes,
                                                              enif_make_uint64(env, bytes)));
            return 0;
        }
    }
    len = OW_REGION_HEADER + (size_t)bytes;
    buffer = enif_alloc(len);
    if (buffer == NULL) {
        *answer = ow_leave_error(env, s, ow_errno_term(env, ENOMEM));
        return 0;
    }
    reason = ow_consume(s, region, expected, buffer, len);
    if (reason == 0 && ids_region_arg != NULL) {
        ow_ids_arg ids;
        ids.results = buffer + OW_REGION_HEADER;
        ids.bodies = s->base + ids_region + OW_REGION_HEADER;
        ids.n = (size_t)n;
        ids.same = 0;
        reason = ow_guarded(s, ow_op_same_ids, &ids);
        ids_wrong = !ids.same;
    }
    enif_rwlock_runlock(s->lock);

    /* A consistent copy: its header must be of the expected tick and count. */
    if (reason == 0) {
        memcpy(&word, buffer + 8, 8);
        header_tick = le64toh(word);
        memcpy(&word, buffer + 16, 8);
        header_n = le64toh(word);
        memcpy(&word, buffer + 24, 8);
        header_q = le64toh(word);
        memcpy(&word, buffer + 32, 8);
        header_bytes = le64toh(word);
        if ((int64_t)header_tick != (int64_t)tick) {
            reason = enif_make_tuple2(env, atom_tick,
                                      enif_make_int64(env, (ErlNifSInt64)header_tick));
        } else if (header_n != n) {
            reason = enif_make_tuple2(env, atom_count, enif_make_uint64(env, header_n));
        } else if (header_q != q) {
            reason = enif_make_tuple2(env, atom_queries, enif_make_uint64(env, header_q));
        } else if (header_bytes != bytes) {
            reason = enif_make_tuple2(env, atom_bytes, enif_make_uint64(env, header_bytes));
        } else if (ids_wrong) {
            /* (After the header's tick and count: a wrong tick is that, not wrong ids.) */
            reason = atom_ids;
        }
    }
    if (reason != 0) {
        enif_free(buffer);
        *answer = ow_error(env, reason);
        return 0;
    }
    *out = buffer;
    *n_out = n;
    *paths_len = bytes - n * OW_RESULT_BYTES;
    return 1;
}

/* {ok, Answer} or, with path queries, {ok, Answer, PathAnswers} (their bytes, a binary). */
static ERL_NIF_TERM ow_ok_paths(ErlNifEnv *env, ERL_NIF_TERM answer, int with_paths,
                                const unsigned char *buffer, uint64_t n, uint64_t paths_len)
{
    ERL_NIF_TERM paths;
    unsigned char *data;
    if (!with_paths) {
        return enif_make_tuple2(env, atom_ok, answer);
    }
    data = enif_make_new_binary(env, (size_t)paths_len, &paths);
    if (data == NULL) {
        return ow_error(env, ow_errno_term(env, ENOMEM));
    }
    if (paths_len > 0) {
        memcpy(data, buffer + OW_REGION_HEADER + n * OW_RESULT_BYTES, (size_t)paths_len);
    }
    return enif_make_tuple3(env, atom_ok, answer, paths);
}

/* Result record i of a copy made by ow_results: its id, x and y. */
static void ow_result(const unsigned char *buffer, uint64_t i, int64_t v[3])
{
    const unsigned char *record = buffer + OW_REGION_HEADER + (size_t)i * OW_RESULT_BYTES;
    for (int f = 0; f < 3; f++) {
        uint64_t word;
        memcpy(&word, record + 8 * f, 8);
        v[f] = (int64_t)le64toh(word);
    }
}

/* consume_results(Ref, RegionOffset, RegionLen, ExpectedSeq, ExpectedTick, N[, IdsRegion[, Q]])
 *   -> {ok, [{Id, X, Y}]} | {ok, [{Id, X, Y}], PathAnswers} | {error, ...}
 * With IdsRegion (a request region of the segment), the results' ids must be those of its first
 * N body records, in order ({error, ids} otherwise): the answer is to the bodies we sent. With Q
 * (the path queries sent), the answers to them too, as their bytes (ow_results). */
static ERL_NIF_TERM nif_consume_results(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    unsigned char *buffer;
    uint64_t n, paths_len;
    ErlNifTime start;
    ERL_NIF_TERM list, answer;

    if (!ow_results(env, argv, argc >= 7 ? &argv[6] : NULL, argc == 8 ? &argv[7] : NULL, &buffer,
                    &n, &paths_len, &start, &answer)) {
        return answer;
    }
    list = enif_make_list(env, 0);
    for (uint64_t i = n; i > 0; i--) {
        int64_t v[3];
        ow_result(buffer, i - 1, v);
        list = enif_make_list_cell(env,
                                   enif_make_tuple3(env, ow_make_i64(env, v[0]),
                                                    ow_make_i64(env, v[1]),
                                                    ow_make_i64(env, v[2])),
                                   list);
    }
    answer = ow_ok_paths(env, list, argc == 8, buffer, n, paths_len);
    enif_free(buffer);
    ow_account(env, start);
    return answer;
}

/* A new tuple: the `arity` elements of `fields` with those at at[1] and at[2] replaced by x and y
 * (`copy`: room for OW_MAX_ARITY terms). When ow_check_terms vouched for the layout of tuples, it
 * is made from the elements where they are and the two written into it before anyone else can
 * see it (it is ours until this NIF returns); otherwise from a copy. */
static inline ERL_NIF_TERM ow_moved(ErlNifEnv *env, const ERL_NIF_TERM *fields, int arity,
                                    const ErlNifSInt64 at[3], int64_t x, int64_t y,
                                    ERL_NIF_TERM *copy)
{
    ERL_NIF_TERM xt = ow_make_i64(env, x), yt = ow_make_i64(env, y), tuple;
    if (ow_terms_ok) {
        ERL_NIF_TERM *elements;
        tuple = enif_make_tuple_from_array(env, fields, (unsigned)arity);
        elements = ow_words(tuple) + 1;
        elements[at[1]] = xt;
        elements[at[2]] = yt;
        return tuple;
    }
    memcpy(copy, fields, (size_t)arity * sizeof(ERL_NIF_TERM));
    copy[at[1]] = xt;
    copy[at[2]] = yt;
    return enif_make_tuple_from_array(env, copy, (unsigned)arity);
}

/* consume_moved's walk of Cells: every entity moved to its result into terms[0..n) (a new tuple
 * with its position elements replaced), or left as it is when its result is its position.
 * Returns 1, or 0 with the term to answer in *answer: badarg (cells that are not a proper list of
 * {Key, [Entity]} pairs, an entity not a tuple of an arity from `need` to OW_MAX_ARITY, its id
 * not an integer), {error, ids} (an entity's id is not its result's, or there are more or fewer
 * entities than results). */
static int ow_move_entities(ErlNifEnv *env, ERL_NIF_TERM cells, const ErlNifSInt64 at[3], int need,
                            const unsigned char *buffer, uint64_t n, ERL_NIF_TERM *terms,
                            ERL_NIF_TERM *answer)
{
    ERL_NIF_TERM copy[OW_MAX_ARITY], e;
    ow_walk w;
    uint64_t i = 0;

    /* (Whole tuples are copied: the first 128 bytes prefetched, a tuple of up to 15 elements.) */
    ow_walk_start(env, &w, cells, 128);
    for (; ow_walk_next(env, &w, &e); i++) {
        const ERL_NIF_TERM *fields;
        ErlNifSInt64 id, x, y;
        int64_t v[3];
        int arity;
        if (i == n) {
            return (*answer = ow_error(env, atom_ids), 0);
        }
        if (!ow_get_tuple(env, e, &arity, &fields) || arity < need || arity > OW_MAX_ARITY ||
            !ow_get_i64(env, fields[at[0]], &id)) {
            return (*answer = enif_make_badarg(env), 0);
        }
        ow_result(buffer, i, v);
        if (v[0] != id) {
            return (*answer = ow_error(env, atom_ids), 0);
        }
        if (ow_get_i64(env, fields[at[1]], &x) && x == v[1] && ow_get_i64(env, fields[at[2]], &y) &&
            y == v[2]) {
            terms[i] = e;
            continue;
        }
        terms[i] = ow_moved(env, fields, arity, at, v[1], v[2], copy);
    }
    if (w.bad) {
        return (*answer = enif_make_badarg(env), 0);
    }
    if (i != n) {
        return (*answer = ow_error(env, atom_ids), 0);
    }
    return 1;
}

/* consume_moved(Ref, RegionOffset, RegionLen, ExpectedSeq, ExpectedTick, N, Cells, Spec[, Q])
 *   -> {ok, [Entity]} | {ok, [Entity], PathAnswers} | {error, ...}
 * consume_results/6 merged into the entities of Cells ([{Key, [Entity]}], in order: the entities
 * whose bodies were sent), without a list of results: the i-th entity must have the i-th
 * result's id, and is answered with its position elements replaced by the result's (the same
 * term when the result is its position). Spec = {IdI, XI, YI} (0-based positions). With Q, as
 * consume_results/8. */
static ERL_NIF_TERM nif_consume_moved(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[])
{
    const ERL_NIF_TERM *fields;
    int arity, need, moved;
    ErlNifSInt64 at[3];
    unsigned char *buffer;
    uint64_t n, paths_len;
    ErlNifTime start;
    ERL_NIF_TERM reason, *terms;

    if (!ow_get_tuple(env, argv[7], &arity, &fields) || arity != 3 ||
        !ow_get_positions(env, fields, 3, at, &need)) {
        return enif_make_badarg(env);
    }
    if (!ow_results(env, argv, NULL, argc == 9 ? &argv[8] : NULL, &buffer, &n, &paths_len, &start,
                    &reason)) {
        return reason;
    }
    terms = enif_alloc((size_t)n * sizeof(ERL_NIF_TERM) + 1);
    if (terms == NULL) {
        enif_free(buffer);
        return ow_error(env, ow_errno_term(env, ENOMEM));
    }
    moved = ow_move_entities(env, argv[6], at, need, buffer, n, terms, &reason);
    if (moved) {
        reason = ow_ok_paths(env, enif_make_list_from_array(env, terms, (unsigned)n), argc == 9,
                             buffer, n, paths_len);
    }
    enif_free(terms);
    enif_free(buffer);
    ow_account(env, start);
    return reason;
}

/* ------------------------------------------------------------------------------------------ */
/* Loading                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static int ow_open_type(ErlNifEnv *env)
{
    ow_shm_type = enif_open_resource_type(env, NULL, "overworld_shm", ow_shm_destructor,
                                          ERL_NIF_RT_CREATE | ERL_NIF_RT_TAKEOVER, NULL);
    return ow_shm_type == NULL ? -1 : 0;
}

static void ow_make_atoms(ErlNifEnv *env)
{
    atom_ok = enif_make_atom(env, "ok");
    atom_error = enif_make_atom(env, "error");
    atom_closed = enif_make_atom(env, "closed");
    atom_bounds = enif_make_atom(env, "bounds");
    atom_resized = enif_make_atom(env, "resized");
    atom_fault = enif_make_atom(env, "fault");
    atom_torn = enif_make_atom(env, "torn");
    atom_seq = enif_make_atom(env, "seq");
    atom_size = enif_make_atom(env, "size");
    atom_tick = enif_make_atom(env, "tick");
    atom_count = enif_make_atom(env, "count");
    atom_ids = enif_make_atom(env, "ids");
    atom_errno = enif_make_atom(env, "errno");
    atom_queries = enif_make_atom(env, "queries");
    atom_bytes = enif_make_atom(env, "bytes");
}

/* Pins this library (its handler must outlive a purge of the module) and installs the SIGBUS
 * handler, once per OS process. */
static int ow_install_sigbus(void)
{
    Dl_info info;
    struct sigaction action;

    if (ow_sigbus_installed) {
        return 0;
    }
    if (dladdr((void *)ow_on_sigbus, &info) == 0 || info.dli_fname == NULL ||
        dlopen(info.dli_fname, RTLD_NOW | RTLD_NODELETE) == NULL) {
        return -1;
    }
    memset(&action, 0, sizeof(action));
    action.sa_sigaction = ow_on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGBUS, &action, &ow_previous_sigbus) != 0) {
        return -1;
    }
    ow_sigbus_installed = 1;
    return 0;
}

static int ow_load(ErlNifEnv *env, void **priv_data, ERL_NIF_TERM load_info)
{
    (void)priv_data;
    (void)load_info;
    if (ow_open_type(env) != 0 || ow_install_sigbus() != 0) {
        return 1;
    }
    ow_make_atoms(env);
    ow_small_ok = ow_check_small(env);
    (void)ow_check_terms(env);
    return 0;
}

static int ow_upgrade(ErlNifEnv *env, void **priv_data, void **old_priv_data,
                      ERL_NIF_TERM load_info)
{
    (void)old_priv_data;
    return ow_load(env, priv_data, load_info);
}

static ErlNifFunc ow_funcs[] = {
    {"create", 2, nif_create, 0},
    {"close", 1, nif_close, 0},
    {"size", 1, nif_size, 0},
    {"write", 3, nif_write, 0},
    {"read", 3, nif_read, 0},
    {"__read_unchecked__", 3, nif_read_unchecked, 0},
    {"publish", 5, nif_publish, 0},
    {"publish_bodies", 6, nif_publish_bodies, 0},
    {"publish_bodies", 7, nif_publish_bodies, 0},
    {"consume", 4, nif_consume, 0},
    {"consume_results", 6, nif_consume_results, 0},
    {"consume_results", 7, nif_consume_results, 0},
    {"consume_results", 8, nif_consume_results, 0},
    {"publish_entities", 7, nif_publish_entities, 0},
    {"publish_entities", 8, nif_publish_entities, 0},
    {"consume_moved", 8, nif_consume_moved, 0},
    {"consume_moved", 9, nif_consume_moved, 0},
};

ERL_NIF_INIT(Elixir.Overworld.Sidecar.Shm, ow_funcs, ow_load, NULL, ow_upgrade, NULL)
