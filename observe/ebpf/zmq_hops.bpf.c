// The hop probes of observe/ebpf/zmq_hops.py (BCC C). The module inserts HIST_C (observe/ebpf/histogram.py)
// at the HIST_C marker below and replaces the RID_MAX, INFLIGHT_MAX and MAX_FRAMES markers with its constants.
#include <uapi/linux/ptrace.h>
__HIST_C__
#define RID_MAX __RID_MAX__
#define MAX_FRAMES __MAX_FRAMES__
#define ROLE_AGENT 2

struct role_t { u32 role; u32 node; };
struct count_key { u32 what; u32 group; };
struct parsed_t { u64 key; u64 sent_ns; u32 rid_len; u8 rid[RID_MAX]; };
struct event_t {
    u64 key; u64 sent_ns; u64 send_ktime_ns; u64 recv_ktime_ns;
    u32 sender_tgid; u32 receiver_tgid; u32 direction; u32 node; u32 rid_len; u8 rid[RID_MAX];
};
struct inflight_t { u64 ts; u32 role; u32 node; u32 tgid; };

BPF_HASH(roles, u32, struct role_t, 1024);
BPF_TABLE("lru_hash", u64, struct inflight_t, inflight, __INFLIGHT_MAX__);
BPF_HASH(hop_hist, struct hist_key, u64, 16384);
BPF_HASH(hop_sum, u32, u64, 1024);
BPF_HASH(counts, struct count_key, u64, 4096);
BPF_PERCPU_ARRAY(scratch, struct parsed_t, 1);
#ifdef TRACE_MESSAGES
BPF_RINGBUF_OUTPUT(events, 1024);
#endif

static __always_inline void count(u32 what, u32 group) {
    struct count_key k = {.what = what, .group = group};
    counts.atomic_increment(k);
}

/* Parse the envelope of a payload (msgpack map: v, request_id, sent_ns first) at user address data;
   -1 when these bytes are not a payload. */
static __always_inline int parse_payload(const u8 *data, u64 size, struct parsed_t *p) {
    if (size < 33 || !data)
        return -1;
    u8 m = 0;
    if (bpf_probe_read_user(&m, 1, data))
        return -1;
    u32 off;
    if ((m & 0xf0) == 0x80)
        off = 1;
    else if (m == 0xde)
        off = 3;
    else
        return -1;
    /* h: 0xa1 'v' <fixint> 0xaa 'request_id' <str header: 0xa0|len, or 0xd9 len> (fixed indices only:
       the verifier rejects variable offsets into the stack) */
    u8 h[16] = {};
    if (bpf_probe_read_user(h, sizeof(h), data + off))
        return -1;
    if (h[0] != 0xa1 || h[1] != 'v' || h[2] > 0x7f || h[3] != 0xaa || h[4] != 'r' || h[13] != 'd')
        return -1;
    u32 len;
    if ((h[14] & 0xe0) == 0xa0) {
        len = h[14] & 0x1f;
        off += 15;
    } else if (h[14] == 0xd9) {
        len = h[15];
        off += 16;
    } else {
        return -1;
    }
    if (off + len + 9 > size)
        return -1;
    u32 n = len < RID_MAX ? len : RID_MAX;
    if (n > 0 && bpf_probe_read_user(p->rid, n & (2 * RID_MAX - 1), data + off))
        return -1;
    u8 t[17] = {};
    if (bpf_probe_read_user(t, sizeof(t), data + off + len))
        return -1;
    if (t[0] != 0xa7 || t[1] != 's' || t[7] != 's')
        return -1;
    u8 tag = t[8];
    u64 sent = 0;
    if (tag <= 0x7f) {
        sent = tag;
    } else if (tag == 0xcc) {
        sent = t[9];
    } else if (tag == 0xcd) {
        sent = ((u64)t[9] << 8) | t[10];
    } else if (tag == 0xce) {
        u32 v32 = 0;
        __builtin_memcpy(&v32, &t[9], 4);
        sent = __builtin_bswap32(v32);
    } else if (tag == 0xcf) {
        u64 v64 = 0;
        __builtin_memcpy(&v64, &t[9], 8);
        sent = __builtin_bswap64(v64);
    } else {
        return -1;
    }
    u64 hash = 0xcbf29ce484222325ULL;
    #pragma unroll
    for (int i = 0; i < RID_MAX; i++) {  /* fully unrolled; a break would make clang count down unbounded */
        if (i < n) {
            hash ^= p->rid[i];
            hash *= 0x100000001b3ULL;
        }
    }
    p->key = hash ^ (sent * 0x9E3779B97F4A7C15ULL);
    p->sent_ns = sent;
    p->rid_len = len;
    return 0;
}

static __always_inline void on_payload_sent(struct parsed_t *p, struct role_t *r, u32 tgid, u64 now) {
    struct inflight_t f = {.ts = now, .role = r->role, .node = r->node, .tgid = tgid};
    inflight.update(&p->key, &f);
    count(0, (r->role << 16) | r->node);
}

static __always_inline void on_payload_received(struct parsed_t *p, struct role_t *r, u32 tgid, u64 now) {
    count(1, (r->role << 16) | r->node);
    struct inflight_t *f = inflight.lookup(&p->key);
    if (!f) {
        count(3, (r->role << 16) | r->node);
        return;
    }
    u64 send_ts = f->ts;
    u32 dir = f->role * 4 + r->role;
    u32 node = f->role == ROLE_AGENT ? f->node : r->node;
    u32 sender = f->tgid;
    inflight.delete(&p->key);
    u64 hop = now - send_ts;
    u32 group = (dir << 16) | node;
    struct hist_key hk = {.group = group, .slot = hist_slot(hop)};
    hop_hist.atomic_increment(hk);
    hop_sum.atomic_increment(group, hop);
    count(2, group);
#ifdef TRACE_MESSAGES
    struct event_t *e = events.ringbuf_reserve(sizeof(struct event_t));
    if (e) {
        e->key = p->key;
        e->sent_ns = p->sent_ns;
        e->send_ktime_ns = send_ts;
        e->recv_ktime_ns = now;
        e->sender_tgid = sender;
        e->receiver_tgid = tgid;
        e->direction = dir;
        e->node = node;
        e->rid_len = p->rid_len;
        __builtin_memcpy(e->rid, p->rid, RID_MAX);
        events.ringbuf_submit(e, BPF_RB_NO_WAKEUP);
    }
#endif
}

#ifdef MODE_UPROBE
BPF_HASH(recv_args, u64, u64, 4096);

/* The bytes of a zmq_msg_t (libzmq 4.3 layout). */
static __always_inline int msg_bytes(const u8 *msg, const u8 **data, u64 *size) {
    u8 type = 0;
    if (bpf_probe_read_user(&type, 1, msg + 42))
        return -1;
    if (type == 101) {
        u8 sz = 0;
        bpf_probe_read_user(&sz, 1, msg + 41);
        *data = msg + 8;
        *size = sz;
        return 0;
    }
    if (type == 102 || type == 105) {
        const u8 *content = 0;
        if (bpf_probe_read_user(&content, sizeof(content), msg + 8) || !content)
            return -1;
        if (bpf_probe_read_user(data, sizeof(*data), content))
            return -1;
        return bpf_probe_read_user(size, sizeof(*size), content + 8) ? -1 : 0;
    }
    if (type == 104) {
        if (bpf_probe_read_user(data, sizeof(*data), msg + 8))
            return -1;
        return bpf_probe_read_user(size, sizeof(*size), msg + 16) ? -1 : 0;
    }
    return -1;
}

static __always_inline int parse_msg(const u8 *msg, struct parsed_t *p) {
    const u8 *data = 0;
    u64 size = 0;
    if (msg_bytes(msg, &data, &size) < 0)
        return -1;
    return parse_payload(data, size, p);
}

int on_msg_send(struct pt_regs *ctx) {
    u64 now = bpf_ktime_get_ns();
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    struct role_t *r = roles.lookup(&tgid);
    if (!r)
        return 0;
    u32 zero = 0;
    struct parsed_t *p = scratch.lookup(&zero);
    if (!p || parse_msg((const u8 *)PT_REGS_PARM1(ctx), p) < 0)
        return 0;
    on_payload_sent(p, r, tgid, now);
    return 0;
}

int on_msg_recv_enter(struct pt_regs *ctx) {
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32;
    if (!roles.lookup(&tgid))
        return 0;
    u64 msg = PT_REGS_PARM1(ctx);
    recv_args.update(&id, &msg);
    return 0;
}

int on_msg_recv_return(struct pt_regs *ctx) {
    u64 now = bpf_ktime_get_ns();
    u64 id = bpf_get_current_pid_tgid();
    u64 *msgp = recv_args.lookup(&id);
    if (!msgp)
        return 0;
    const u8 *msg = (const u8 *)*msgp;
    recv_args.delete(&id);
    if ((int)PT_REGS_RC(ctx) < 0)
        return 0;
    u32 tgid = id >> 32;
    struct role_t *r = roles.lookup(&tgid);
    if (!r)
        return 0;
    u32 zero = 0;
    struct parsed_t *p = scratch.lookup(&zero);
    if (!p || parse_msg(msg, p) < 0)
        return 0;
    on_payload_received(p, r, tgid, now);
    return 0;
}
#endif  /* MODE_UPROBE */

#ifdef MODE_SYSCALL
/* The ZMTP 3 byte stream of each TCP/IPC connection, as libzmq's I/O thread send()s and recv()s it:
     frame = [flags: 1 byte: MORE 0x01 | LONG 0x02 | COMMAND 0x04][size: 1 byte, or 8 bytes BE if LONG][body]
   A message is [type frame, size 1][payload frame][tensor frames] (a ROUTER's identity frame stays local).
   One cursor per (tgid, fd, direction) carries a frame that straddles two syscalls. */
struct stream_key { u32 tgid; u32 fd; u32 dir; };
struct stream_t { u64 skip; u32 synced; u32 after_type; };
struct recv_arg_t { u64 buf; u32 fd; };

BPF_TABLE("lru_hash", struct stream_key, struct stream_t, streams, 4096);
BPF_HASH(recv_args, u64, struct recv_arg_t, 4096);

/* Walk the frames of buf[0:len) (up to MAX_FRAMES); call the send or receive hook for each payload. */
static __always_inline void walk(const u8 *buf, u64 len, u32 fd, u32 dir, struct role_t *r, u32 tgid, u64 now) {
    struct stream_key sk = {.tgid = tgid, .fd = fd, .dir = dir};
    struct stream_t fresh = {.skip = 0, .synced = 1, .after_type = 0};
    struct stream_t *st = streams.lookup_or_try_init(&sk, &fresh);
    if (!st)
        return;
    u64 off = st->skip;
    if (off >= len) {
        st->skip = off - len;
        return;
    }
    u32 synced = st->synced;
    u32 after_type = st->after_type;
    u32 zero = 0;
    struct parsed_t *p = scratch.lookup(&zero);
    if (!p)
        return;
    for (int i = 0; i < MAX_FRAMES; i++) {
        if (off >= len)
            break;
        u8 hdr[9] = {};
        if (bpf_probe_read_user(hdr, sizeof(hdr), buf + off)) {
            synced = 0;
            break;
        }
        u8 flags = hdr[0];
        u64 size, hlen;
        if (flags & 0xf8) {
            synced = 0;
            break;
        }
        if (flags & 0x02) {
            u64 be = 0;
            __builtin_memcpy(&be, &hdr[1], 8);
            size = __builtin_bswap64(be);
            hlen = 9;
            if (size >> 40) {
                synced = 0;
                break;
            }
        } else {
            size = hdr[1];
            hlen = 2;
        }
        if (off + hlen > len) {  /* a header split between two syscalls: give up until resynced */
            synced = 0;
            break;
        }
        u64 body = off + hlen;
        if (flags & 0x04) {
            after_type = 0;
        } else if (size == 1) {
            after_type = 1;
        } else {
            if (after_type && synced && parse_payload(buf + body, size <= len - body ? size : len - body, p) == 0) {
                if (dir == 0)
                    on_payload_sent(p, r, tgid, now);
                else
                    on_payload_received(p, r, tgid, now);
            }
            after_type = 0;
        }
        off = body + size;
    }
    if (!synced) {
        st->synced = 0;
        st->skip = 0;
        st->after_type = 0;
        return;
    }
    if (off < len) {  /* more frames than MAX_FRAMES: the rest of this buffer is not looked at */
        st->synced = 0;
        st->skip = 0;
        return;
    }
    st->skip = off - len;
    st->after_type = after_type;
}

/* An unsynced stream is taken back when a buffer starts on a frame boundary: it must hold only whole
   frames with valid headers (the ZMTP greeting does not). */
static __always_inline void resync(const u8 *buf, u64 len, u32 fd, u32 dir, u32 tgid) {
    struct stream_key sk = {.tgid = tgid, .fd = fd, .dir = dir};
    struct stream_t *st = streams.lookup(&sk);
    if (!st || st->synced)
        return;
    u64 off = 0;
    for (int i = 0; i < MAX_FRAMES; i++) {
        if (off >= len)
            break;
        u8 hdr[9] = {};
        if (bpf_probe_read_user(hdr, sizeof(hdr), buf + off) || (hdr[0] & 0xf8))
            return;
        u64 size = hdr[1];
        u64 hlen = 2;
        if (hdr[0] & 0x02) {
            u64 be = 0;
            __builtin_memcpy(&be, &hdr[1], 8);
            size = __builtin_bswap64(be);
            hlen = 9;
        }
        off += hlen + size;
    }
    if (off == len)
        st->synced = 1;  /* the next buffer starts on a frame boundary */
}

static __always_inline void on_bytes(const u8 *buf, u64 len, u32 fd, u32 dir, u64 now) {
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    struct role_t *r = roles.lookup(&tgid);
    if (!r)
        return;
    struct stream_key sk = {.tgid = tgid, .fd = fd, .dir = dir};
    struct stream_t *st = streams.lookup(&sk);
    if (st && !st->synced) {
        resync(buf, len, fd, dir, tgid);
        return;
    }
    walk(buf, len, fd, dir, r, tgid, now);
}

TRACEPOINT_PROBE(syscalls, sys_enter_sendto) {
    if (args->len == 0)
        return 0;
    on_bytes((const u8 *)args->buff, args->len, args->fd, 0, bpf_ktime_get_ns());
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_recvfrom) {
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32;
    if (!roles.lookup(&tgid))
        return 0;
    struct recv_arg_t a = {.buf = (u64)args->ubuf, .fd = args->fd};
    recv_args.update(&id, &a);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_exit_recvfrom) {
    u64 now = bpf_ktime_get_ns();
    u64 id = bpf_get_current_pid_tgid();
    struct recv_arg_t *a = recv_args.lookup(&id);
    if (!a)
        return 0;
    u64 buf = a->buf;
    u32 fd = a->fd;
    recv_args.delete(&id);
    if (args->ret <= 0)
        return 0;
    on_bytes((const u8 *)buf, args->ret, fd, 1, now);
    return 0;
}
#endif  /* MODE_SYSCALL */
