/* The format's rules and the codec's hot loops in C: storage.codec's place and
 * check_next (the one check of an entry, which every reader and the follower run),
 * storage.batch's encode_leader_batch and validate_follower_batch, entry for entry
 * the same bytes (storage/codec.py's HEADER, CHAIN and INDEX_RECORD, big-endian;
 * zlib's CRC-32), and the split of a client's binary batch into bodies
 * (api.bodies.decode_bodies).
 *
 * Each returns its result, or None when the input breaks a rule or does not fit
 * these types: the pure-Python reference then decides, and names the rule
 * (rejections are off the hot path, so there is one wording).
 * tests/storage/test_compiled_codec.py holds both to the same bytes and verdicts.
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
#define STAMP_SIZE 16
#define DISTANCE_SIZE 1
#define DISTANCE_MAX 255
#define SEQUENCE_BITS 48
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

static uint32_t crc_of(const unsigned char *p, Py_ssize_t n) {
    uLong crc = crc32(0L, Z_NULL, 0);
    while (n > 0) {  /* zlib takes a uInt length */
        uInt chunk = n > (1 << 30) ? (1u << 30) : (uInt)n;
        crc = crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return (uint32_t)crc;
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
    if (offset < 0 || offset > end - HEADER_SIZE)
        return 0;
    const unsigned char *h = buf + offset;
    int32_t magic = (int32_t)get32(h);
    int32_t size = (int32_t)get32(h + 4);
    int64_t term = (int64_t)get64(h + 16);
    int64_t pos = (int64_t)get64(h + 24);
    uint32_t chain = get32(h + 36);
    uint32_t bcrc = get32(h + 40);
    int32_t body_size = (int32_t)get32(h + 44);
    if (magic < MAGIC_NORMAL || magic > MAGIC_CONTINUED || body_size < 0
            || (int64_t)size != HEADER_SIZE + (int64_t)body_size || (magic == MAGIC_PRODUCED && body_size < STAMP_SIZE)
            || (magic == MAGIC_CONTINUED && body_size < DISTANCE_SIZE)
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
        return NULL;
    Sound sound;
    PyObject *result;
    if (end <= view.len && write_pos >= -1 && prev_chain >= -1 && prev_chain <= 0xFFFFFFFFLL
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

/* encode_batch(bodies, first_index, term, magic, channel, write_pos, prev_chain_crc, file_size[, stamp])
 * -> (data, runs, fillers, index_records, positions, chain, end_pos) | None; with a stamp
 * (producer_id, epoch, first sequence) the bodies are a producer's, sequences counting up: a PRODUCED
 * head, then CONTINUED entries (a new head where one starts a data file, and at the 256th) */
static PyObject *encode_batch(PyObject *self, PyObject *args) {
    PyObject *bodies, *stamp = Py_None;
    long long first_index, term, write_pos, prev_chain, file_size;
    int magic, channel;
    if (!PyArg_ParseTuple(args, "O!LLiiLLL|O", &PyList_Type, &bodies, &first_index, &term, &magic, &channel,
                          &write_pos, &prev_chain, &file_size, &stamp))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(bodies);
    if (count == 0 || file_size <= MIN_BLANK_LEN || prev_chain < 0 || prev_chain > 0xFFFFFFFFLL || write_pos < 0
            || !IN_RANGE(first_index) || !IN_RANGE(write_pos) || !IN_RANGE(file_size))
        Py_RETURN_NONE;
    unsigned long long producer_id = 0, epoch = 0, first_seq = 0;
    int stamped = stamp != Py_None;
    if (stamped && (magic != MAGIC_PRODUCED || !PyTuple_Check(stamp)
                    || !PyArg_ParseTuple(stamp, "KKK", &producer_id, &epoch, &first_seq)
                    || epoch >= (1ULL << (64 - SEQUENCE_BITS)) || first_seq + (uint64_t)count > (1ULL << SEQUENCE_BITS)))
        goto unstampable;
    if (magic == MAGIC_CONTINUED || (!stamped && magic == MAGIC_PRODUCED))
        Py_RETURN_NONE;
    Py_ssize_t extra = stamped ? DISTANCE_SIZE : 0;  /* what a continuation's body gains */
    /* a head's stamp is longer, and every 256th entry is a head */
    Py_ssize_t total = stamped ? (STAMP_SIZE - DISTANCE_SIZE) * (1 + (count - 1) / (DISTANCE_MAX + 1)) : 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *body = PyList_GET_ITEM(bodies, i);
        if (!PyBytes_Check(body) || PyBytes_GET_SIZE(body) > INT32_MAX - HEADER_SIZE - STAMP_SIZE)
            Py_RETURN_NONE;
        total += HEADER_SIZE + extra + PyBytes_GET_SIZE(body);
    }
    /* a batch that runs into another file starts a head in each: room for the most, cut to size after */
    if (stamped && write_pos % file_size + total + MIN_BLANK_LEN > file_size)
        total += (STAMP_SIZE - DISTANCE_SIZE) * count;
    PyObject *data = PyBytes_FromStringAndSize(NULL, total);
    PyObject *records = PyBytes_FromStringAndSize(NULL, count * RECORD_SIZE);
    PyObject *positions = PyList_New(count);
    PyObject *runs = PyList_New(0);
    PyObject *fillers = PyList_New(0);
    if (data == NULL || records == NULL || positions == NULL || runs == NULL || fillers == NULL)
        goto failed;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(data);
    unsigned char *record = (unsigned char *)PyBytes_AS_STRING(records);
    Placement at = {write_pos, 0, write_pos};
    int64_t offset = 0, index = first_index;
    uint32_t chain = (uint32_t)prev_chain;
    Py_ssize_t head = -1;  /* the entry that stamps the next continuation (-1: none yet) */
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *body = PyList_GET_ITEM(bodies, i);
        const unsigned char *bytes = (const unsigned char *)PyBytes_AS_STRING(body);
        int32_t client_size = (int32_t)PyBytes_GET_SIZE(body);
        int32_t entry_magic = magic, prefix = 0;
        if (stamped) {  /* stamped once, but for an entry that starts a file or is 256 on: a head again */
            if (head >= 0 && i - head <= DISTANCE_MAX
                    && place_at(at.pos, HEADER_SIZE + DISTANCE_SIZE + client_size, file_size) == at.pos) {
                entry_magic = MAGIC_CONTINUED;
                prefix = DISTANCE_SIZE;
            } else {
                head = i;
                prefix = STAMP_SIZE;
            }
        }
        int32_t body_size = prefix + client_size;
        int32_t size = HEADER_SIZE + body_size;
        int64_t pos = place_at(at.pos, size, file_size);
        if (pos < 0)
            goto rejected;
        if (move_to(&at, runs, fillers, offset, pos) < 0)
            goto failed;
        unsigned char *body_at = out + HEADER_SIZE;
        if (entry_magic == MAGIC_CONTINUED) {
            body_at[0] = (unsigned char)(i - head);
        } else if (stamped) {
            put64(body_at, producer_id);
            put64(body_at + 8, epoch << SEQUENCE_BITS | (first_seq + (uint64_t)i));
        }
        memcpy(body_at + prefix, bytes, (size_t)client_size);
        uint32_t bcrc = crc_of(body_at, body_size);
        chain = chain_crc(chain, index, term, bcrc);
        put32(out, (uint32_t)entry_magic);
        put32(out + 4, (uint32_t)size);
        put64(out + 8, (uint64_t)index);
        put64(out + 16, (uint64_t)term);
        put64(out + 24, (uint64_t)pos);
        put32(out + 32, (uint32_t)channel);
        put32(out + 36, chain);
        put32(out + 40, bcrc);
        put32(out + 44, (uint32_t)body_size);
        out += size;
        put_record(record, entry_magic, pos, size, index, term);
        record += RECORD_SIZE;
        PyObject *where = PyLong_FromLongLong(pos);
        if (where == NULL)
            goto failed;
        PyList_SET_ITEM(positions, i, where);
        at.pos = pos + size;
        offset += size;
        index += 1;
    }
    if (append_run(runs, at.run_from, offset, at.run_pos) < 0 || (offset < total && _PyBytes_Resize(&data, offset) < 0))
        goto failed;
    return Py_BuildValue("(NNNNNkL)", data, runs, fillers, records, positions, (unsigned long)chain,
                         (long long)at.pos);
rejected:
    Py_DECREF(data); Py_DECREF(records); Py_DECREF(positions); Py_DECREF(runs); Py_DECREF(fillers);
    Py_RETURN_NONE;
failed:
    Py_XDECREF(data); Py_XDECREF(records); Py_XDECREF(positions); Py_XDECREF(runs); Py_XDECREF(fillers);
    return NULL;
unstampable:  /* not a stamp these types hold: the reference decides */
    PyErr_Clear();
    Py_RETURN_NONE;
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

/* A producer's batch's head: its index (-1: no batch a continuation could go on) and stamp. */
typedef struct {
    int64_t index;
    uint64_t producer_id, epoch, sequence;
} Head;

/* validate_batch(data, first_index, prev_term, write_pos, prev_chain_crc or -1, file_size[, tail])
 * -> (runs, fillers, index_records, positions, last_term, chain, end_pos, control_indices, produced) | None;
 * tail (head index, producer_id, epoch, sequence): the head of the log's last entry, for a continuation
 * the entries begin with (storage.batch.reference_validate) */
static PyObject *validate_batch(PyObject *self, PyObject *args) {
    Py_buffer view;
    long long first_index, prev_term, write_pos, prev_chain, file_size;
    PyObject *tail = Py_None;
    if (!PyArg_ParseTuple(args, "y*LLLLL|O", &view, &first_index, &prev_term, &write_pos, &prev_chain, &file_size,
                          &tail))
        return NULL;
    Head head = {-1, 0, 0, 0};
    long long tail_index;
    unsigned long long tail_id, tail_epoch, tail_sequence;
    if (tail != Py_None) {
        if (!PyTuple_Check(tail) || !PyArg_ParseTuple(tail, "LKKK", &tail_index, &tail_id, &tail_epoch, &tail_sequence)) {
            PyErr_Clear();  /* not a head these types hold: the reference decides */
            PyBuffer_Release(&view);
            Py_RETURN_NONE;
        }
        head = (Head){tail_index, tail_id, tail_epoch, tail_sequence};
    }
    PyObject *result = NULL, *runs = NULL, *fillers = NULL, *records = NULL, *positions = NULL, *controls = NULL,
             *produced = NULL;
    Produced run = {0, 0, 0, 0, -1};
    const unsigned char *buf = (const unsigned char *)view.buf;
    int64_t end_offset = view.len;
    if (end_offset < HEADER_SIZE || file_size <= MIN_BLANK_LEN || prev_chain > 0xFFFFFFFFLL || write_pos < 0
            || !IN_RANGE(first_index) || !IN_RANGE(write_pos) || !IN_RANGE(file_size))
        goto rejected;
    runs = PyList_New(0);
    fillers = PyList_New(0);
    positions = PyList_New(0);
    controls = PyList_New(0);
    produced = PyList_New(0);
    /* at most one record per header's worth of bytes; trimmed at the end */
    records = PyBytes_FromStringAndSize(NULL, (end_offset / HEADER_SIZE) * RECORD_SIZE);
    if (runs == NULL || fillers == NULL || positions == NULL || controls == NULL || produced == NULL || records == NULL)
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
        if ((entry.magic == MAGIC_CONFIG_CHANGE || entry.magic == MAGIC_CONSUMER) && append_int(controls, expected) < 0)
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
            || flush_produced(produced, &run) < 0)
        goto failed;
    PyObject *control_indices = PyList_AsTuple(controls);
    if (control_indices == NULL)
        goto failed;
    PyObject *produced_runs = PyList_AsTuple(produced);
    if (produced_runs == NULL) {
        Py_DECREF(control_indices);
        goto failed;
    }
    result = Py_BuildValue("(NNNNLkLNN)", runs, fillers, records, positions, (long long)term_floor,
                           (unsigned long)chain, (long long)at.pos, control_indices, produced_runs);
    Py_DECREF(controls);
    Py_DECREF(produced);
    PyBuffer_Release(&view);
    return result;
rejected:
    Py_XDECREF(runs); Py_XDECREF(fillers); Py_XDECREF(records); Py_XDECREF(positions); Py_XDECREF(controls);
    Py_XDECREF(produced);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
failed:
    Py_XDECREF(runs); Py_XDECREF(fillers); Py_XDECREF(records); Py_XDECREF(positions); Py_XDECREF(controls);
    Py_XDECREF(produced);
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
        return NULL;
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
