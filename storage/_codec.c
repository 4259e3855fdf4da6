/* The format's rules and the codec's hot loops in C: storage.codec's place and
 * check_next (the one check of an entry, which every reader and the follower run),
 * storage.batch's encode_leader_batch and validate_follower_batch, entry for entry
 * the same bytes (storage/codec.py's HEADER, CHAIN and INDEX_RECORD, big-endian;
 * zlib's CRC-32), and the split of a client's binary batch into bodies
 * (api.bodies.decode_bodies).
 *
 * Each returns its result, or None when the input breaks a rule or does not fit
 * these types (an int past int64, a stamp past its bits): the pure-Python reference
 * then decides, and names the rule (rejections are off the hot path, so there is one
 * wording). tests/storage/test_compiled_codec.py and test_codec_bounds.py hold both
 * to the same bytes and verdicts, and tests/storage/fuzz_codec.py fuzzes each
 * function against the reference (`make fuzz`).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define HEADER_SIZE 48
#define RECORD_SIZE 32
#define CHAIN_SIZE 24
#define MIN_BLANK_LEN 8
#define MAGIC_NORMAL 1
#define MAGIC_CONFIG_CHANGE 3
#define MAGIC_PRODUCED 4
#define MAGIC_CONSUMER 5
#define MAGIC_CONTINUED 6
#define MAGIC_PRODUCER_SESSION 7
#define MAGIC_CLUSTER_VERSION 8
#define MAGIC_MESSAGE 9
#define MAGIC_TOPIC 10
#define MAGIC_QUEUE_COMMIT 11
#define MAGIC_LAST MAGIC_QUEUE_COMMIT
#define MESSAGE_HEADER_SIZE 33  /* storage.message.MESSAGE_HEADER */

/* storage.codec.CONTROL_MAGICS: the entries a follower reads as they join its log */
static inline int is_control(int32_t magic) {
    return magic == MAGIC_CONFIG_CHANGE || magic == MAGIC_CONSUMER || magic == MAGIC_PRODUCER_SESSION
        || magic == MAGIC_CLUSTER_VERSION || magic == MAGIC_TOPIC || magic == MAGIC_QUEUE_COMMIT;
}
#define STAMP_SIZE 16
#define DISTANCE_SIZE 1
#define DISTANCE_MAX 255
#define SEQUENCE_BITS 48
#define SEQUENCE_END (1ULL << SEQUENCE_BITS)  /* one past the last sequence a stamp holds */
/* a CRC over this many bytes or more runs without the GIL (below, the release costs more than it saves) */
#define CRC_UNLOCKED_MIN (64 * 1024)
/* indices, positions and sizes this far from int64's ends cannot overflow as a batch adds to them;
 * beyond, the Python reference (with its unbounded ints) decides */
#define IN_RANGE(v) ((v) > -(1LL << 60) && (v) < (1LL << 60))

static void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}

static void put64(unsigned char *p, uint64_t v) {
    put32(p, (uint32_t)(v >> 32));
    put32(p + 4, (uint32_t)v);
}

static uint32_t get32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static uint64_t get64(const unsigned char *p) {
    return ((uint64_t)get32(p) << 32) | get32(p + 4);
}

static uint32_t crc_run(const unsigned char *p, Py_ssize_t n) {
    uLong crc = crc32(0L, Z_NULL, 0);
    while (n > 0) {  /* zlib takes a uInt length */
        uInt chunk = n > (1 << 30) ? (1u << 30) : (uInt)n;
        crc = crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return (uint32_t)crc;
}

/* zlib's CRC-32 of n bytes, called with the GIL held. A large buffer's runs without it, so a 64 MiB
 * push does not hold the event loop: the caller keeps the bytes alive and in place meanwhile (a
 * Py_buffer it holds, or a bytes object of its own no other code has yet). */
static uint32_t crc_of(const unsigned char *p, Py_ssize_t n) {
    if (n < CRC_UNLOCKED_MIN)
        return crc_run(p, n);
    uint32_t crc;
    Py_BEGIN_ALLOW_THREADS
    crc = crc_run(p, n);
    Py_END_ALLOW_THREADS
    return crc;
}

/* Where an argument does not fit its C type (PyArg_ParseTuple raised OverflowError): None, for the
 * reference to decide; any other error stands. */
static PyObject *unfit(void) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError))
        return NULL;
    PyErr_Clear();
    Py_RETURN_NONE;
}

/* An int that a u64 holds, or 0 (no error left set) for anything else: negative, too large, not an int
 * (the "K" format would mask them to a u64 instead). */
static int as_u64(PyObject *o, uint64_t *v) {
    if (!PyLong_Check(o))
        return 0;
    *v = PyLong_AsUnsignedLongLong(o);
    if (*v == (uint64_t)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

static uint32_t chain_crc(uint32_t chain, int64_t index, int64_t term, uint32_t bcrc) {
    unsigned char b[CHAIN_SIZE];
    put32(b, chain);
    put64(b + 4, (uint64_t)index);
    put64(b + 12, (uint64_t)term);
    put32(b + 20, bcrc);
    return crc_of(b, CHAIN_SIZE);
}

static void put_record(unsigned char *r, int32_t magic, int64_t pos, int32_t size, int64_t index, int64_t term) {
    put32(r, (uint32_t)magic);
    put64(r + 4, (uint64_t)pos);
    put32(r + 12, (uint32_t)size);
    put64(r + 16, (uint64_t)index);
    put64(r + 24, (uint64_t)term);
}

/* storage.codec.place: where an entry of `size` bytes goes from write offset `pos` (>= 0);
 * -1 if it fits no data file */
static int64_t place_at(int64_t pos, int64_t size, int64_t file_size) {
    if (size + MIN_BLANK_LEN > file_size)
        return -1;
    int64_t in_file = pos % file_size;
    if (in_file + size + MIN_BLANK_LEN > file_size)
        return pos - in_file + file_size;
    return pos;
}

static int append_run(PyObject *runs, int64_t from, int64_t to, int64_t pos) {
    PyObject *run = Py_BuildValue("(LLL)", (long long)from, (long long)to, (long long)pos);
    if (run == NULL)
        return -1;
    int failed = PyList_Append(runs, run);
    Py_DECREF(run);
    return failed;
}

static int append_int(PyObject *list, int64_t value) {
    PyObject *item = PyLong_FromLongLong(value);
    if (item == NULL)
        return -1;
    int failed = PyList_Append(list, item);
    Py_DECREF(item);
    return failed;
}

/* Where a batch's entries go: the write position, and the run of entries (from data offset
 * run_from, placed at run_pos) that the next filler ends. */
typedef struct {
    int64_t pos, run_from, run_pos;
} Placement;

/* The entry at data offset `offset` goes to `placed`: if that is not the write position, the file
 * is closed with a filler there and a new run starts. 0, or -1 with a Python error set. */
static int move_to(Placement *at, PyObject *runs, PyObject *fillers, int64_t offset, int64_t placed) {
    if (placed == at->pos)
        return 0;
    if (offset > at->run_from && append_run(runs, at->run_from, offset, at->run_pos) < 0)
        return -1;
    if (append_int(fillers, at->pos) < 0)
        return -1;
    at->pos = at->run_pos = placed;
    at->run_from = offset;
    return 0;
}

/* A sound entry's fields, as check_entry reads them. */
typedef struct {
    int32_t magic, size;
    int64_t term, pos;
    uint32_t chain;
} Sound;

/* storage.codec.reference_check_next's rules, in its order: 1 for a sound entry (`out` filled), 0
 * for anything else, which the reference words. write_pos -1: positions unchecked; has_chain 0:
 * the first link is taken on trust. */
static int check_entry(const unsigned char *buf, int64_t offset, int64_t end, int64_t index, int64_t term_floor,
                       int64_t write_pos, int has_chain, uint32_t prev_chain, int64_t file_size, int in_file,
                       Sound *out) {
    /* end - offset, never end - HEADER_SIZE: an end near INT64_MIN would overflow */
    if (offset < 0 || end < offset || end - offset < HEADER_SIZE)
        return 0;
    const unsigned char *h = buf + offset;
    int32_t magic = (int32_t)get32(h);
    int32_t size = (int32_t)get32(h + 4);
    int64_t term = (int64_t)get64(h + 16);
    int64_t pos = (int64_t)get64(h + 24);
    uint32_t chain = get32(h + 36);
    uint32_t bcrc = get32(h + 40);
    int32_t body_size = (int32_t)get32(h + 44);
    if (magic < MAGIC_NORMAL || magic > MAGIC_LAST || body_size < 0
            || (int64_t)size != HEADER_SIZE + (int64_t)body_size || (magic == MAGIC_PRODUCED && body_size < STAMP_SIZE)
            || (magic == MAGIC_CONTINUED && body_size < DISTANCE_SIZE)
            || (magic == MAGIC_MESSAGE && body_size < MESSAGE_HEADER_SIZE)
            || (int64_t)get64(h + 8) != index || term < term_floor)
        return 0;
    int64_t placed = pos;
    if (write_pos >= 0) {
        placed = place_at(write_pos, size, file_size);
        if (placed < 0 || (in_file && placed != write_pos))
            return 0;
    }
    if (pos != placed || size > end - offset || crc_of(h + HEADER_SIZE, body_size) != bcrc)
        return 0;
    if (has_chain && chain_crc(prev_chain, index, term, bcrc) != chain)
        return 0;
    if (magic == MAGIC_CONTINUED) {  /* a distance back into the log, and not at a file's start */
        int64_t distance = (int64_t)h[HEADER_SIZE];
        if (distance < 1 || distance > index || (file_size > 0 && placed % file_size == 0))
            return 0;
    }
    if (magic == MAGIC_MESSAGE && (h[HEADER_SIZE + MESSAGE_HEADER_SIZE - 1] & 1)
            && body_size < MESSAGE_HEADER_SIZE + STAMP_SIZE)  /* a stamped message holds its stamp */
        return 0;
    out->magic = magic;
    out->size = size;
    out->term = term;
    out->pos = placed;
    out->chain = chain;
    return 1;
}

/* check_next(buf, offset, end, index, term_floor, write_pos or -1, prev_chain or -1, file_size, in_file)
 * -> (None, magic, size, term, chain, pos) for a sound entry, else None: storage.codec.check_next */
static PyObject *check_next(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long offset, end, index, term_floor, write_pos, prev_chain, file_size;
    int in_file;
    if (!PyArg_ParseTuple(args, "y*LLLLLLLp", &view, &offset, &end, &index, &term_floor, &write_pos, &prev_chain,
                          &file_size, &in_file))
        return unfit();
    Sound sound;
    PyObject *result;
    if (end >= 0 && end <= view.len && write_pos >= -1 && prev_chain >= -1 && prev_chain <= 0xFFFFFFFFLL
            && (write_pos < 0 || file_size > MIN_BLANK_LEN) && IN_RANGE(index) && IN_RANGE(term_floor)
            && IN_RANGE(write_pos) && IN_RANGE(file_size)
            && check_entry((const unsigned char *)view.buf, offset, end, index, term_floor, write_pos, prev_chain >= 0,
                           (uint32_t)prev_chain, file_size, in_file, &sound))
        result = Py_BuildValue("(OiiLkL)", Py_None, sound.magic, sound.size, (long long)sound.term,
                               (unsigned long)sound.chain, (long long)sound.pos);
    else
        result = Py_NewRef(Py_None);
    PyBuffer_Release(&view);
    return result;
}

/* A list's items, each with a reference of our own. Any allocation may run the garbage collector, and
 * with it Python code (a finalizer, a gc callback) that changes the caller's list: the batch is sized
 * and encoded from these. (PyList_AsTuple is no such copy: it reads the list's length, then allocates
 * the tuple, which may collect, then copies from the list.) PyMem_New runs no Python code. */
typedef struct {
    PyObject **items;
    Py_ssize_t count;
} Snapshot;

static int take_snapshot(Snapshot *bodies, PyObject *list) {
    Py_ssize_t count = PyList_GET_SIZE(list);
    bodies->items = PyMem_New(PyObject *, count > 0 ? count : 1);
    if (bodies->items == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++)
        bodies->items[i] = Py_NewRef(PyList_GET_ITEM(list, i));
    bodies->count = count;
    return 0;
}

static void drop_snapshot(Snapshot *bodies) {
    for (Py_ssize_t i = 0; i < bodies->count; i++)
        Py_DECREF(bodies->items[i]);
    PyMem_Free(bodies->items);
}

/* the largest client body an entry takes: its header, and a head's stamp, stay within an int32 size */
#define BODY_MAX (INT32_MAX - HEADER_SIZE - STAMP_SIZE)
/* the largest buffer a batch is encoded into (a batch of more is the reference's to refuse) */
#define BATCH_BYTES_MAX (PY_SSIZE_T_MAX / 2)

/* The bytes a batch's entries take (a stamped one's with room for a head at each entry where it may
 * run into another file), or -1 where a body is not bytes or too large for an entry, or the total is
 * past BATCH_BYTES_MAX. */
static Py_ssize_t batch_room(const Snapshot *bodies, int stamped, int64_t write_pos, int64_t file_size) {
    Py_ssize_t count = bodies->count;
    if (count > BATCH_BYTES_MAX / (HEADER_SIZE + STAMP_SIZE))
        return -1;
    Py_ssize_t extra = stamped ? DISTANCE_SIZE : 0;  /* what a continuation's body gains */
    /* a head's stamp is longer, and every 256th entry is a head */
    Py_ssize_t total = stamped ? (STAMP_SIZE - DISTANCE_SIZE) * (1 + (count - 1) / (DISTANCE_MAX + 1)) : 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *body = bodies->items[i];
        if (!PyBytes_Check(body) || PyBytes_GET_SIZE(body) > BODY_MAX)
            return -1;
        if (total > BATCH_BYTES_MAX - (HEADER_SIZE + extra + PyBytes_GET_SIZE(body)))
            return -1;
        total += HEADER_SIZE + extra + PyBytes_GET_SIZE(body);
    }
    /* a batch that runs into another file starts a head in each: room for the most, cut to size after */
    if (stamped && write_pos % file_size + total + MIN_BLANK_LEN > file_size)
        total += (STAMP_SIZE - DISTANCE_SIZE) * count;
    return total;
}

/* A producer's stamp on a batch of `count` entries: 1 for one that these types hold, its sequences
 * first_seq... within 48 bits (compared, never added, so nothing wraps); else 0, and the reference
 * refuses it. */
static int take_stamp(PyObject *stamp, Py_ssize_t count, uint64_t *producer_id, uint64_t *epoch,
                      uint64_t *first_seq) {
    return PyTuple_Check(stamp) && PyTuple_GET_SIZE(stamp) == 3 && as_u64(PyTuple_GET_ITEM(stamp, 0), producer_id)
           && as_u64(PyTuple_GET_ITEM(stamp, 1), epoch) && as_u64(PyTuple_GET_ITEM(stamp, 2), first_seq)
           && *epoch < (1ULL << (64 - SEQUENCE_BITS)) && (uint64_t)count <= SEQUENCE_END
           && *first_seq <= SEQUENCE_END - (uint64_t)count;
}

/* A batch's arguments, and where its encoding has got to. */
typedef struct {
    int64_t first_index, term, file_size;
    int32_t magic, channel;
    int stamped;
    uint64_t producer_id, epoch, first_seq;
    Placement at;
    uint32_t chain;
} Encoding;

/* One entry's header and body at `out`, which has room for it (the caller checked). */
static void put_entry(unsigned char *out, const Encoding *e, int32_t magic, int64_t index, int64_t pos,
                      int32_t prefix, Py_ssize_t distance, PyObject *body, uint32_t *chain) {
    unsigned char *body_at = out + HEADER_SIZE;
    int32_t body_size = prefix + (int32_t)PyBytes_GET_SIZE(body);
    if (magic == MAGIC_CONTINUED) {
        body_at[0] = (unsigned char)distance;
    } else if (e->stamped) {
        put64(body_at, e->producer_id);
        put64(body_at + 8, e->epoch << SEQUENCE_BITS | (e->first_seq + (uint64_t)(index - e->first_index)));
    }
    memcpy(body_at + prefix, PyBytes_AS_STRING(body), (size_t)PyBytes_GET_SIZE(body));
    uint32_t bcrc = crc_of(body_at, body_size);
    *chain = chain_crc(*chain, index, e->term, bcrc);
    put32(out, (uint32_t)magic);
    put32(out + 4, (uint32_t)(HEADER_SIZE + body_size));
    put64(out + 8, (uint64_t)index);
    put64(out + 16, (uint64_t)e->term);
    put64(out + 24, (uint64_t)pos);
    put32(out + 32, (uint32_t)e->channel);
    put32(out + 36, *chain);
    put32(out + 40, bcrc);
    put32(out + 44, (uint32_t)body_size);
}

/* The entries into `data` (sized by batch_room; `*used` of its bytes), their records and positions, the
 * runs and fillers: 1, or 0 where an entry fits no data file, or -1 with a Python error set. No byte goes
 * past `data`'s end: an entry that would is an error (SystemError), never a write. */
static int encode_entries(Encoding *e, const Snapshot *bodies, PyObject *data, unsigned char *record,
                          PyObject *positions, PyObject *runs, PyObject *fillers, int64_t *used) {
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(data);
    const unsigned char *end = out + PyBytes_GET_SIZE(data);
    int64_t offset = 0, index = e->first_index;
    Py_ssize_t head = -1;  /* the entry that stamps the next continuation (-1: none yet) */
    for (Py_ssize_t i = 0; i < bodies->count; i++) {
        PyObject *body = bodies->items[i];
        if (!PyBytes_Check(body) || PyBytes_GET_SIZE(body) > BODY_MAX) {
            PyErr_SetString(PyExc_SystemError, "encode_batch: a body changed while its batch was encoded");
            return -1;
        }
        int32_t client_size = (int32_t)PyBytes_GET_SIZE(body);
        int32_t entry_magic = e->magic, prefix = 0;
        if (e->stamped) {  /* stamped once, but for an entry that starts a file or is 256 on: a head again */
            if (head >= 0 && i - head <= DISTANCE_MAX
                    && place_at(e->at.pos, HEADER_SIZE + DISTANCE_SIZE + client_size, e->file_size) == e->at.pos) {
                entry_magic = MAGIC_CONTINUED;
                prefix = DISTANCE_SIZE;
            } else {
                head = i;
                prefix = STAMP_SIZE;
            }
        }
        int32_t size = HEADER_SIZE + prefix + client_size;
        int64_t pos = place_at(e->at.pos, size, e->file_size);
        if (pos < 0)
            return 0;
        if (move_to(&e->at, runs, fillers, offset, pos) < 0)
            return -1;
        if (size > end - out) {
            PyErr_SetString(PyExc_SystemError, "encode_batch: an entry runs past the buffer sized for its batch");
            return -1;
        }
        put_entry(out, e, entry_magic, index, pos, prefix, i - head, body, &e->chain);
        out += size;
        put_record(record, entry_magic, pos, size, index, e->term);
        record += RECORD_SIZE;
        PyObject *where = PyLong_FromLongLong(pos);
        if (where == NULL)
            return -1;
        PyList_SET_ITEM(positions, i, where);
        e->at.pos = pos + size;
        offset += size;
        index += 1;
    }
    if (append_run(runs, e->at.run_from, offset, e->at.run_pos) < 0)
        return -1;
    *used = offset;
    return 1;
}

/* encode_batch(bodies, first_index, term, magic, channel, write_pos, prev_chain_crc, file_size[, stamp])
 * -> (data, runs, fillers, index_records, positions, chain, end_pos) | None; with a stamp
 * (producer_id, epoch, first sequence) the bodies are a producer's, sequences counting up: a PRODUCED
 * head, then CONTINUED entries (a new head where one starts a data file, and at the 256th) */
static PyObject *encode_batch(PyObject *self, PyObject *args) {
    PyObject *list, *stamp = Py_None;
    long long first_index, term, write_pos, prev_chain, file_size;
    int magic, channel;
    if (!PyArg_ParseTuple(args, "O!LLiiLLL|O", &PyList_Type, &list, &first_index, &term, &magic, &channel,
                          &write_pos, &prev_chain, &file_size, &stamp))
        return unfit();
    Encoding e = {first_index, term, file_size, magic, channel, stamp != Py_None, 0, 0, 0,
                  {write_pos, 0, write_pos}, (uint32_t)prev_chain};
    Py_ssize_t count = PyList_GET_SIZE(list);
    if (count == 0 || file_size <= MIN_BLANK_LEN || prev_chain < 0 || prev_chain > 0xFFFFFFFFLL || write_pos < 0
            || !IN_RANGE(first_index) || !IN_RANGE(write_pos) || !IN_RANGE(file_size)
            || magic == MAGIC_CONTINUED || e.stamped != (magic == MAGIC_PRODUCED)
            || (e.stamped && !take_stamp(stamp, count, &e.producer_id, &e.epoch, &e.first_seq)))
        Py_RETURN_NONE;
    Snapshot bodies;
    if (take_snapshot(&bodies, list) < 0)
        return NULL;
    PyObject *result = NULL, *data = NULL, *records = NULL, *positions = NULL, *runs = NULL, *fillers = NULL;
    Py_ssize_t total = batch_room(&bodies, e.stamped, write_pos, file_size);
    if (total < 0) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    data = PyBytes_FromStringAndSize(NULL, total);
    records = PyBytes_FromStringAndSize(NULL, bodies.count * RECORD_SIZE);
    positions = PyList_New(bodies.count);
    runs = PyList_New(0);
    fillers = PyList_New(0);
    if (data == NULL || records == NULL || positions == NULL || runs == NULL || fillers == NULL)
        goto done;
    int64_t used = 0;
    int encoded = encode_entries(&e, &bodies, data, (unsigned char *)PyBytes_AS_STRING(records), positions, runs,
                                 fillers, &used);
    if (encoded == 0)
        result = Py_NewRef(Py_None);
    if (encoded <= 0 || (used < total && _PyBytes_Resize(&data, used) < 0))
        goto done;
    result = Py_BuildValue("(OOOOOkL)", data, runs, fillers, records, positions, (unsigned long)e.chain,
                           (long long)e.at.pos);
done:
    Py_XDECREF(data); Py_XDECREF(records); Py_XDECREF(positions); Py_XDECREF(runs); Py_XDECREF(fillers);
    drop_snapshot(&bodies);
    return result;
}

/* A run of one producer's consecutive PRODUCED entries: storage.codec.ProducedRun. */
typedef struct {
    uint64_t producer_id, epoch, first_seq;
    int64_t first_index, last_index;  /* last_index < first_index: no run */
} Produced;

static int flush_produced(PyObject *list, const Produced *run) {
    if (run->last_index < run->first_index)
        return 0;
    PyObject *item = Py_BuildValue("(KKKLL)", (unsigned long long)run->producer_id, (unsigned long long)run->epoch,
                                   (unsigned long long)run->first_seq, (long long)run->first_index,
                                   (long long)run->last_index);
    if (item == NULL)
        return -1;
    int failed = PyList_Append(list, item);
    Py_DECREF(item);
    return failed;
}

/* The producer's entry `index` with this stamp follows `run`: storage.codec.add_produced. */
static int add_produced(PyObject *list, Produced *run, uint64_t producer_id, uint64_t epoch, uint64_t sequence,
                        int64_t index) {
    if (run->last_index >= run->first_index && run->producer_id == producer_id && run->epoch == epoch
            && run->last_index + 1 == index && run->first_seq + (uint64_t)(index - run->first_index) == sequence) {
        run->last_index = index;
        return 0;
    }
    if (flush_produced(list, run) < 0)
        return -1;
    *run = (Produced){producer_id, epoch, sequence, index, index};
    return 0;
}

/* A run of one queue's messages: storage.message.QueuedRun (producer_id -1: unstamped) */
typedef struct {
    uint64_t topic_id, queue, first_offset;
    int64_t first_index, last_index;  /* last_index < first_index: no run */
    int stamped;
    uint64_t producer_id, epoch, first_seq;
} Queued;

static int flush_queued(PyObject *list, const Queued *run) {
    if (run->last_index < run->first_index)
        return 0;
    PyObject *item = run->stamped
        ? Py_BuildValue("(KKKLLKKK)", (unsigned long long)run->topic_id, (unsigned long long)run->queue,
                        (unsigned long long)run->first_offset, (long long)run->first_index, (long long)run->last_index,
                        (unsigned long long)run->producer_id, (unsigned long long)run->epoch,
                        (unsigned long long)run->first_seq)
        : Py_BuildValue("(KKKLLiii)", (unsigned long long)run->topic_id, (unsigned long long)run->queue,
                        (unsigned long long)run->first_offset, (long long)run->first_index, (long long)run->last_index,
                        -1, 0, 0);  /* storage.message.UNSTAMPED */
    if (item == NULL)
        return -1;
    int failed = PyList_Append(list, item);
    Py_DECREF(item);
    return failed;
}

/* The MESSAGE entry `index`, whose body is `body`, follows `run`: storage.message.add_queued. */
static int add_queued(PyObject *list, Queued *run, const unsigned char *body, int64_t index) {
    uint64_t topic_id = get64(body), queue = get32(body + 8), offset = get64(body + 12);
    int stamped = body[MESSAGE_HEADER_SIZE - 1] & 1;
    uint64_t producer_id = 0, epoch = 0, sequence = 0;
    if (stamped) {  /* the producer's stamp follows the header */
        uint64_t rest = get64(body + MESSAGE_HEADER_SIZE + 8);
        producer_id = get64(body + MESSAGE_HEADER_SIZE);
        epoch = rest >> SEQUENCE_BITS;
        sequence = rest & ((1ULL << SEQUENCE_BITS) - 1);
    }
    int64_t step = index - run->first_index;
    if (run->last_index >= run->first_index && run->topic_id == topic_id && run->queue == queue
            && run->last_index + 1 == index && run->first_offset + (uint64_t)step == offset
            && run->stamped == stamped && run->producer_id == producer_id && run->epoch == epoch
            && (!stamped || run->first_seq + (uint64_t)step == sequence)) {
        run->last_index = index;
        return 0;
    }
    if (flush_queued(list, run) < 0)
        return -1;
    *run = (Queued){topic_id, queue, offset, index, index, stamped, producer_id, epoch, sequence};
    return 0;
}

/* A producer's batch's head: its index (-1: no batch a continuation could go on) and stamp. */
typedef struct {
    int64_t index;
    uint64_t producer_id, epoch, sequence;
} Head;

/* The head a push's first entries continue, (index, producer_id, epoch, sequence): 1 for one that these
 * types hold (an index in IN_RANGE, the stamp's fields as a stamp stores them), else 0. */
static int take_head(PyObject *tail, Head *head) {
    long long index;
    if (!PyTuple_Check(tail) || PyTuple_GET_SIZE(tail) != 4 || !PyLong_Check(PyTuple_GET_ITEM(tail, 0)))
        return 0;
    index = PyLong_AsLongLong(PyTuple_GET_ITEM(tail, 0));
    if (index == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    head->index = index;
    return IN_RANGE(index) && index >= 0 && as_u64(PyTuple_GET_ITEM(tail, 1), &head->producer_id)
           && as_u64(PyTuple_GET_ITEM(tail, 2), &head->epoch) && as_u64(PyTuple_GET_ITEM(tail, 3), &head->sequence)
           && head->epoch < (1ULL << (64 - SEQUENCE_BITS)) && head->sequence < SEQUENCE_END;
}

/* validate_batch(data, first_index, prev_term, write_pos, prev_chain_crc or -1, file_size[, tail])
 * -> (runs, fillers, index_records, positions, last_term, chain, end_pos, control_indices, produced, queued)
 * | None;
 * tail (head index, producer_id, epoch, sequence): the head of the log's last entry, for a continuation
 * the entries begin with (storage.batch.reference_validate) */
static PyObject *validate_batch(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long first_index, prev_term, write_pos, prev_chain, file_size;
    PyObject *tail = Py_None;
    if (!PyArg_ParseTuple(args, "y*LLLLL|O", &view, &first_index, &prev_term, &write_pos, &prev_chain, &file_size,
                          &tail))
        return unfit();
    Head head = {-1, 0, 0, 0};
    if (tail != Py_None && !take_head(tail, &head)) {  /* not a head these types hold: the reference decides */
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    PyObject *result = NULL, *runs = NULL, *fillers = NULL, *records = NULL, *positions = NULL, *controls = NULL,
             *produced = NULL, *queued = NULL;
    Produced run = {0, 0, 0, 0, -1};
    Queued queue_run = {0, 0, 0, 0, -1, 0, 0, 0, 0};
    const unsigned char *buf = (const unsigned char *)view.buf;
    int64_t end_offset = view.len;
    if (end_offset < HEADER_SIZE || file_size <= MIN_BLANK_LEN || prev_chain < -1 || prev_chain > 0xFFFFFFFFLL
            || write_pos < 0 || !IN_RANGE(first_index) || !IN_RANGE(write_pos) || !IN_RANGE(file_size))
        goto rejected;
    runs = PyList_New(0);
    fillers = PyList_New(0);
    positions = PyList_New(0);
    controls = PyList_New(0);
    produced = PyList_New(0);
    queued = PyList_New(0);
    /* at most one record per header's worth of bytes; trimmed at the end */
    records = PyBytes_FromStringAndSize(NULL, (end_offset / HEADER_SIZE) * RECORD_SIZE);
    if (runs == NULL || fillers == NULL || positions == NULL || controls == NULL || produced == NULL || queued == NULL
            || records == NULL)
        goto failed;
    unsigned char *record = (unsigned char *)PyBytes_AS_STRING(records);
    int has_chain = prev_chain >= 0;
    uint32_t chain = has_chain ? (uint32_t)prev_chain : 0;
    int64_t expected = first_index, term_floor = prev_term, offset = 0;
    Placement at = {write_pos, 0, write_pos};
    Py_ssize_t count = 0;
    while (offset < end_offset) {
        Sound entry;
        if (!check_entry(buf, offset, end_offset, expected, term_floor, at.pos, has_chain, chain, file_size, 0, &entry))
            goto rejected;
        if (move_to(&at, runs, fillers, offset, entry.pos) < 0)
            goto failed;
        chain = entry.chain;
        has_chain = 1;
        if (is_control(entry.magic) && append_int(controls, expected) < 0)
            goto failed;
        const unsigned char *body = buf + offset + HEADER_SIZE;
        if (entry.magic == MAGIC_PRODUCED) {
            uint64_t rest = get64(body + 8);
            head = (Head){expected, get64(body), rest >> SEQUENCE_BITS, rest & ((1ULL << SEQUENCE_BITS) - 1)};
        } else if (entry.magic == MAGIC_CONTINUED) {  /* it must name the head of the batch it goes on */
            int64_t distance = (int64_t)body[0];
            if (head.index < 0 || expected - distance != head.index)
                goto rejected;
        } else {
            head.index = -1;
        }
        if ((entry.magic == MAGIC_PRODUCED || entry.magic == MAGIC_CONTINUED)
                && add_produced(produced, &run, head.producer_id, head.epoch, head.sequence + (uint64_t)(expected - head.index),
                                expected) < 0)
            goto failed;
        if (entry.magic == MAGIC_MESSAGE && add_queued(queued, &queue_run, body, expected) < 0)
            goto failed;
        put_record(record, entry.magic, entry.pos, entry.size, expected, entry.term);
        record += RECORD_SIZE;
        count += 1;
        if (append_int(positions, entry.pos) < 0)
            goto failed;
        term_floor = entry.term;
        at.pos = entry.pos + entry.size;
        offset += entry.size;
        expected += 1;
    }
    if (append_run(runs, at.run_from, offset, at.run_pos) < 0 || _PyBytes_Resize(&records, count * RECORD_SIZE) < 0
            || flush_produced(produced, &run) < 0 || flush_queued(queued, &queue_run) < 0)
        goto failed;
    PyObject *control_indices = PyList_AsTuple(controls);
    if (control_indices == NULL)
        goto failed;
    PyObject *produced_runs = PyList_AsTuple(produced);
    if (produced_runs == NULL) {
        Py_DECREF(control_indices);
        goto failed;
    }
    PyObject *queued_runs = PyList_AsTuple(queued);
    if (queued_runs == NULL) {
        Py_DECREF(control_indices);
        Py_DECREF(produced_runs);
        goto failed;
    }
    result = Py_BuildValue("(NNNNLkLNNN)", runs, fillers, records, positions, (long long)term_floor,
                           (unsigned long)chain, (long long)at.pos, control_indices, produced_runs, queued_runs);
    Py_DECREF(controls);
    Py_DECREF(produced);
    Py_DECREF(queued);
    PyBuffer_Release(&view);
    return result;
rejected:
    Py_XDECREF(runs); Py_XDECREF(fillers); Py_XDECREF(records); Py_XDECREF(positions); Py_XDECREF(controls);
    Py_XDECREF(produced); Py_XDECREF(queued);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
failed:
    Py_XDECREF(runs); Py_XDECREF(fillers); Py_XDECREF(records); Py_XDECREF(positions); Py_XDECREF(controls);
    Py_XDECREF(produced); Py_XDECREF(queued);
    PyBuffer_Release(&view);
    return NULL;
}

/* split_bodies(data, max_entries or -1) -> [body, ...] | None: api.bodies.decode_bodies's loop over a
 * binary batch (u32 big-endian length, then the body); None when the lengths do not add up or there
 * are more than max_entries */
static PyObject *split_bodies(PyObject *self, PyObject *args) {
    const unsigned char *buf;
    Py_ssize_t end;
    long long max_entries;
    if (!PyArg_ParseTuple(args, "y#L", &buf, &end, &max_entries))
        return unfit();
    PyObject *bodies = PyList_New(0);
    if (bodies == NULL)
        return NULL;
    Py_ssize_t offset = 0;
    while (offset < end) {
        if (max_entries >= 0 && PyList_GET_SIZE(bodies) == max_entries)
            goto rejected;
        if (end - offset < 4)
            goto rejected;
        Py_ssize_t size = (Py_ssize_t)get32(buf + offset);
        offset += 4;
        if (size > end - offset)
            goto rejected;
        PyObject *body = PyBytes_FromStringAndSize((const char *)buf + offset, size);
        if (body == NULL || PyList_Append(bodies, body) < 0) {
            Py_XDECREF(body);
            Py_DECREF(bodies);
            return NULL;
        }
        Py_DECREF(body);
        offset += size;
    }
    return bodies;
rejected:
    Py_DECREF(bodies);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"split_bodies", split_bodies, METH_VARARGS, "A binary batch's bodies: api.bodies.decode_bodies's, or None."},
    {"encode_batch", encode_batch, METH_VARARGS, "A leader's batch: storage.batch.encode_leader_batch's parts, or None."},
    {"check_next", check_next, METH_VARARGS,
     "The next entry's check: storage.codec.check_next's verdict on a sound entry, or None for the reference."},
    {"validate_batch", validate_batch, METH_VARARGS,
     "A follower's batch: storage.batch.validate_follower_batch's parts, or None if it breaks a rule."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "storage._codec", NULL, -1, methods};

PyMODINIT_FUNC PyInit__codec(void) {
    return PyModule_Create(&module);
}
