/* unwind.c - call stacks for the heap profile, from the unwind tables, cached.
 *
 * glibc's backtrace() goes through libgcc's unwinder, which finds and interprets a
 * frame's call-frame information (CFI, the .eh_frame section) anew for every frame
 * of every stack it walks: about 14,000 instructions on a shallow stack.  A program
 * returns to few addresses, over and over, so this unwinder interprets the CFI of a
 * return address once and keeps what it says, the rule that gives the caller's
 * registers (the canonical frame address, CFA, as rsp or rbp plus an offset; where
 * the return address and rbp were saved from it), in a lock-free table: a known
 * frame then costs a probe and two or three loads.
 *
 * It knows x86-64 and the rules compilers write for ordinary code.  A frame with a
 * rule it cannot express (a CFA computed by an expression, a register saved in a
 * register, a signal frame) makes hz_unwind give up and the caller use backtrace();
 * a frame in no object's tables ends the stack, as it ends libgcc's.  A library
 * that is unloaded takes its return addresses' meaning with it: the table is
 * dropped (by generation) whenever the dynamic linker reports an object removed.
 * The caller may also keep a memo of its last walk (hz_unwind_memo_t): the stack
 * words that walk read.  hz_unwind (internal.h, inline at its call site) checks them
 * first, and when all still hold what they held, from the same pc and sp (the memo
 * is one thread's), the walk would find the same stack and is not made.  A sampling loop's
 * stacks repeat so, and cost a handful of loads.
 * Nothing here allocates, takes a lock of its own or writes outside its table and
 * the memo.
 */
#include <link.h>
#include <stdint.h>

#include "internal.h"

#if defined(__x86_64__)

/* DWARF register numbers on x86-64 (System V psABI). */
enum { REG_RBP = 6, REG_RSP = 7, REG_RA = 16 };

/* ------------------------------------------------------------ rules */

enum rule_kind { RULE_NONE, RULE_RSP, RULE_RBP, RULE_END, RULE_UNKNOWN };

/* How to step from a frame to its caller, packed in 64 bits so that a table entry
 * is written and read whole.  kind RULE_RSP / RULE_RBP: CFA = that register +
 * cfa_off; the return address is at CFA + ra_off; rbp at CFA + rbp_off (0: rbp is
 * unchanged).  RULE_END: the outermost frame.  RULE_UNKNOWN: not expressible. */
struct rule {
    int32_t cfa_off;
    int16_t rbp_off;
    int8_t ra_off8; /* ra_off / 8 */
    uint8_t kind;
};
_Static_assert(sizeof(struct rule) == 8, "a rule is one word");

static uint64_t rule_pack(struct rule r) {
    uint64_t v;
    memcpy(&v, &r, sizeof v);
    return v;
}

static struct rule rule_unpack(uint64_t v) {
    struct rule r;
    memcpy(&r, &v, sizeof r);
    return r;
}

static struct rule rule_of_kind(enum rule_kind kind) {
    struct rule r = {0, 0, 0, (uint8_t)kind};
    return r;
}

/* ------------------------------------------------------------ reading tables */

/* Pointer encodings of .eh_frame (LSB Core, "DWARF Extensions"). */
enum {
    PE_OMIT = 0xff,
    PE_ABSPTR = 0x00, PE_ULEB128 = 0x01, PE_UDATA2 = 0x02, PE_UDATA4 = 0x03,
    PE_UDATA8 = 0x04, PE_SLEB128 = 0x09, PE_SDATA2 = 0x0a, PE_SDATA4 = 0x0b,
    PE_SDATA8 = 0x0c,
    PE_PCREL = 0x10, PE_DATAREL = 0x30, PE_INDIRECT = 0x80,
};

/* A cursor over a table that stops (ok = false) rather than read past its end. */
struct cursor {
    const uint8_t *p, *end;
    bool ok;
};

static uint64_t read_uleb(struct cursor *c) {
    uint64_t v = 0;
    for (unsigned shift = 0; c->p < c->end && shift < 64; shift += 7) {
        uint8_t b = *c->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0) return v;
    }
    c->ok = false;
    return 0;
}

static int64_t read_sleb(struct cursor *c) {
    uint64_t v = 0;
    unsigned shift = 0;
    while (c->p < c->end && shift < 64) {
        uint8_t b = *c->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
        if ((b & 0x80) == 0) {
            if (shift < 64 && (b & 0x40) != 0) v |= ~(uint64_t)0 << shift;
            return (int64_t)v;
        }
    }
    c->ok = false;
    return 0;
}

static uint64_t read_fixed(struct cursor *c, size_t n) {
    if ((size_t)(c->end - c->p) < n) {
        c->ok = false;
        return 0;
    }
    uint64_t v = 0;
    memcpy(&v, c->p, n); /* little-endian */
    c->p += n;
    return v;
}

static uint8_t read_u8(struct cursor *c) { return (uint8_t)read_fixed(c, 1); }

/* A pointer in encoding enc; datarel is the base of PE_DATAREL (.eh_frame_hdr's
 * start).  Indirect and unknown encodings fail. */
static uint64_t read_encoded(struct cursor *c, uint8_t enc, uint64_t datarel) {
    uint64_t where = (uint64_t)(uintptr_t)c->p, v;
    switch (enc & 0x0f) {
    case PE_ABSPTR: case PE_UDATA8: case PE_SDATA8: v = read_fixed(c, 8); break;
    case PE_ULEB128: v = read_uleb(c); break;
    case PE_SLEB128: v = (uint64_t)read_sleb(c); break;
    case PE_UDATA2: v = read_fixed(c, 2); break;
    case PE_SDATA2: v = (uint64_t)(int64_t)(int16_t)read_fixed(c, 2); break;
    case PE_UDATA4: v = read_fixed(c, 4); break;
    case PE_SDATA4: v = (uint64_t)(int64_t)(int32_t)read_fixed(c, 4); break;
    default: c->ok = false; return 0;
    }
    switch (enc & 0x70) {
    case 0: break;
    case PE_PCREL: v += where; break;
    case PE_DATAREL: v += datarel; break;
    default: c->ok = false; return 0;
    }
    if ((enc & PE_INDIRECT) != 0) c->ok = false;
    return v;
}

/* The register state the CFI describes at one address. */
struct frame_state {
    int64_t cfa_off;
    int64_t rbp_off;      /* rbp saved at CFA + rbp_off; 0: unchanged */
    int64_t ra_off;       /* the return address at CFA + ra_off */
    int cfa_reg;          /* REG_RSP, REG_RBP, or -1: anything else */
    bool rbp_unknown;     /* rbp saved some other way */
    bool ra_undefined;    /* the outermost frame */
    bool ra_unknown;
};

struct cie {
    struct cursor insns;  /* initial instructions */
    uint64_t code_align;
    int64_t data_align;
    uint64_t ra_reg;
    uint8_t fde_enc;
    bool has_aug_data;    /* 'z': FDEs carry an augmentation length */
    bool signal_frame;
};

/* A register's save rule, as far as rbp and the return address are concerned. */
static void set_saved(struct frame_state *s, uint64_t reg, int64_t off) {
    if (reg == REG_RBP) s->rbp_off = off, s->rbp_unknown = false;
    if (reg == REG_RA) s->ra_off = off, s->ra_undefined = false, s->ra_unknown = false;
    if (reg == REG_RSP) s->cfa_reg = -1; /* rsp is the CFA by definition here */
}

static void set_unknown(struct frame_state *s, uint64_t reg) {
    if (reg == REG_RBP) s->rbp_unknown = true;
    if (reg == REG_RA) s->ra_unknown = true;
    if (reg == REG_RSP) s->cfa_reg = -1;
}

static void set_same(struct frame_state *s, const struct frame_state *init, uint64_t reg) {
    if (reg == REG_RBP) s->rbp_off = init->rbp_off, s->rbp_unknown = init->rbp_unknown;
    if (reg == REG_RA)
        s->ra_off = init->ra_off, s->ra_undefined = init->ra_undefined,
        s->ra_unknown = init->ra_unknown;
}

#define STATE_STACK 8

/* Runs CFA instructions from loc while loc <= target; init is the state after the
 * CIE's initial instructions (for DW_CFA_restore).  False for what it cannot read. */
static bool run_cfa(struct cursor c, const struct cie *cie, uint64_t loc, uint64_t target,
                    struct frame_state *s, const struct frame_state *init) {
    struct frame_state stack[STATE_STACK];
    int depth = 0;
    while (c.ok && c.p < c.end) {
        uint8_t op = read_u8(&c);
        uint64_t reg, delta = 0;
        switch (op >> 6) {
        case 1: delta = (uint64_t)(op & 0x3f) * cie->code_align; goto advance;
        case 2: set_saved(s, op & 0x3f, (int64_t)read_uleb(&c) * cie->data_align); continue;
        case 3: set_same(s, init, op & 0x3f); continue;
        default: break;
        }
        switch (op) {
        case 0x00: continue;                                 /* nop */
        case 0x01: {                                         /* set_loc */
            uint64_t to = read_encoded(&c, cie->fde_enc, 0);
            if (to > target) return c.ok;
            loc = to;
            continue;
        }
        case 0x02: delta = read_fixed(&c, 1) * cie->code_align; goto advance;
        case 0x03: delta = read_fixed(&c, 2) * cie->code_align; goto advance;
        case 0x04: delta = read_fixed(&c, 4) * cie->code_align; goto advance;
        case 0x05:                                           /* offset_extended */
            reg = read_uleb(&c);
            set_saved(s, reg, (int64_t)read_uleb(&c) * cie->data_align);
            continue;
        case 0x06: case 0x08:                                /* restore_ext, same_value */
            reg = read_uleb(&c);
            if (op == 0x06) set_same(s, init, reg);
            else if (reg == REG_RBP) s->rbp_off = 0, s->rbp_unknown = false;
            else set_unknown(s, reg);
            continue;
        case 0x07:                                           /* undefined */
            reg = read_uleb(&c);
            if (reg == REG_RA) s->ra_undefined = true;
            else set_unknown(s, reg);
            continue;
        case 0x09:                                           /* register */
            reg = read_uleb(&c);
            (void)read_uleb(&c);
            set_unknown(s, reg);
            continue;
        case 0x0a:                                           /* remember_state */
            if (depth == STATE_STACK) return false;
            stack[depth++] = *s;
            continue;
        case 0x0b:                                           /* restore_state */
            if (depth == 0) return false;
            *s = stack[--depth];
            continue;
        case 0x0c:                                           /* def_cfa */
            reg = read_uleb(&c);
            s->cfa_reg = reg == REG_RSP || reg == REG_RBP ? (int)reg : -1;
            s->cfa_off = (int64_t)read_uleb(&c);
            continue;
        case 0x0d:                                           /* def_cfa_register */
            reg = read_uleb(&c);
            s->cfa_reg = reg == REG_RSP || reg == REG_RBP ? (int)reg : -1;
            continue;
        case 0x0e: s->cfa_off = (int64_t)read_uleb(&c); continue; /* def_cfa_offset */
        case 0x0f:                                           /* def_cfa_expression */
            c.p += read_uleb(&c);
            s->cfa_reg = -1;
            continue;
        case 0x10: case 0x16:                                /* (val_)expression */
            reg = read_uleb(&c);
            c.p += read_uleb(&c);
            set_unknown(s, reg);
            continue;
        case 0x11:                                           /* offset_extended_sf */
            reg = read_uleb(&c);
            set_saved(s, reg, read_sleb(&c) * cie->data_align);
            continue;
        case 0x12:                                           /* def_cfa_sf */
            reg = read_uleb(&c);
            s->cfa_reg = reg == REG_RSP || reg == REG_RBP ? (int)reg : -1;
            s->cfa_off = read_sleb(&c) * cie->data_align;
            continue;
        case 0x13: s->cfa_off = read_sleb(&c) * cie->data_align; continue;
        case 0x14: case 0x15:                                /* val_offset(_sf) */
            reg = read_uleb(&c);
            if (op == 0x14) (void)read_uleb(&c);
            else (void)read_sleb(&c);
            set_unknown(s, reg);
            continue;
        case 0x2e: (void)read_uleb(&c); continue;            /* GNU_args_size */
        case 0x2f:                                           /* GNU_negative_offset_ext */
            reg = read_uleb(&c);
            set_saved(s, reg, -(int64_t)read_uleb(&c) * cie->data_align);
            continue;
        default: return false;
        }
    advance:
        if (loc + delta > target) return c.ok;
        loc += delta;
    }
    return c.ok && c.p <= c.end;
}

/* A cursor over the CIE or FDE at p, past its length (32 bits, or 64 after an
 * escape), ending where the entry ends. */
static struct cursor open_entry(const uint8_t *p) {
    struct cursor c = {p, p + 12, true};
    uint64_t len = read_fixed(&c, 4);
    if (len == 0xffffffffu) len = read_fixed(&c, 8);
    c.end = c.p + len;
    return c;
}

/* Reads the CIE at p; false for a version or augmentation it does not know. */
static bool read_cie(const uint8_t *p, struct cie *cie) {
    struct cursor c = open_entry(p);
    if (!c.ok || read_fixed(&c, 4) != 0) return false; /* a CIE's id is 0 */
    uint8_t version = read_u8(&c);
    if (version != 1 && version != 3) return false;
    const char *aug = (const char *)c.p;
    while (c.p < c.end && *c.p != 0) c.p++;
    c.p++;
    cie->code_align = read_uleb(&c);
    cie->data_align = read_sleb(&c);
    cie->ra_reg = version == 1 ? read_u8(&c) : read_uleb(&c);
    cie->fde_enc = PE_ABSPTR;
    cie->has_aug_data = aug[0] == 'z';
    cie->signal_frame = false;
    if (cie->has_aug_data) {
        uint64_t aug_len = read_uleb(&c);
        const uint8_t *after = c.p + aug_len;
        for (const char *a = aug + 1; *a != '\0' && c.ok; a++) {
            if (*a == 'R') cie->fde_enc = read_u8(&c);
            else if (*a == 'L') (void)read_u8(&c);
            else if (*a == 'P') (void)read_encoded(&c, read_u8(&c) & 0x7f, 0);
            else if (*a == 'S') cie->signal_frame = true;
            else break; /* the rest is skipped by length */
        }
        c.p = after;
    } else if (aug[0] != '\0') {
        return false; /* "eh" and other pre-'z' forms */
    }
    cie->insns = c;
    return c.ok && c.p <= c.end && cie->ra_reg == REG_RA;
}

/* The FDE covering pc in the .eh_frame_hdr at hdr, or NULL. */
static const uint8_t *find_fde(const uint8_t *hdr, uint64_t pc) {
    if (hdr[0] != 1 || hdr[3] != (PE_DATAREL | PE_SDATA4)) return NULL;
    struct cursor c = {hdr + 4, hdr + 4 + 16, true};
    (void)read_encoded(&c, hdr[1], (uint64_t)(uintptr_t)hdr);
    uint64_t count = read_encoded(&c, hdr[2], (uint64_t)(uintptr_t)hdr);
    if (!c.ok || count == 0) return NULL;
    const int32_t *table = (const int32_t *)(const void *)c.p; /* {start, fde} pairs */
    int64_t rel = (int64_t)(pc - (uint64_t)(uintptr_t)hdr);
    uint64_t lo = 0, hi = count; /* the last entry whose start <= pc */
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (table[2 * mid] <= rel) lo = mid;
        else hi = mid;
    }
    if (table[2 * lo] > rel) return NULL;
    return hdr + table[2 * lo + 1];
}

/* The rule for pc in the object whose .eh_frame_hdr is at hdr. */
static struct rule rule_from_tables(const uint8_t *hdr, uint64_t pc) {
    const uint8_t *fde = find_fde(hdr, pc);
    if (fde == NULL) return rule_of_kind(RULE_END); /* as libgcc: no FDE, no caller */
    struct cursor c = open_entry(fde);
    const uint8_t *id_at = c.p;
    uint64_t cie_ptr = read_fixed(&c, 4);
    struct cie cie;
    if (!c.ok || cie_ptr == 0 || !read_cie(id_at - cie_ptr, &cie))
        return rule_of_kind(RULE_UNKNOWN);
    uint64_t start = read_encoded(&c, cie.fde_enc, 0);
    uint64_t range = read_encoded(&c, cie.fde_enc & 0x0f, 0);
    if (!c.ok || pc < start || pc - start >= range) return rule_of_kind(RULE_END);
    if (cie.signal_frame) return rule_of_kind(RULE_UNKNOWN);
    if (cie.has_aug_data) c.p += read_uleb(&c);
    struct frame_state init = {.cfa_reg = -1, .ra_unknown = true};
    if (!run_cfa(cie.insns, &cie, 0, UINT64_MAX, &init, &init))
        return rule_of_kind(RULE_UNKNOWN);
    struct frame_state s = init;
    if (!run_cfa(c, &cie, start, pc, &s, &init)) return rule_of_kind(RULE_UNKNOWN);
    if (s.ra_undefined) return rule_of_kind(RULE_END);
    if (s.cfa_reg < 0 || s.rbp_unknown || s.ra_unknown || s.cfa_off < 0 ||
        s.cfa_off > INT32_MAX || s.rbp_off < INT16_MIN || s.rbp_off > INT16_MAX ||
        s.ra_off % 8 != 0 || s.ra_off < -1024 || s.ra_off > 1016)
        return rule_of_kind(RULE_UNKNOWN);
    struct rule r = {(int32_t)s.cfa_off, (int16_t)s.rbp_off, (int8_t)(s.ra_off / 8),
                     (uint8_t)(s.cfa_reg == REG_RSP ? RULE_RSP : RULE_RBP)};
    return r;
}

/* ------------------------------------------------------------ objects */

struct find_object {
    uint64_t pc;
    const uint8_t *hdr;      /* out: its .eh_frame_hdr, NULL when none */
    unsigned long long subs; /* out: objects removed so far */
};

static int find_object_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    struct find_object *f = arg;
    (void)size;
    f->subs = info->dlpi_subs;
    if (f->pc == 0) return 1; /* only the count asked */
    const ElfW(Phdr) *eh = NULL;
    bool inside = false;
    for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uint64_t at = (uint64_t)info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && f->pc >= at && f->pc - at < ph->p_memsz) inside = true;
        if (ph->p_type == PT_GNU_EH_FRAME) eh = ph;
    }
    if (!inside) return 0;
    if (eh != NULL) f->hdr = (const uint8_t *)(uintptr_t)(info->dlpi_addr + eh->p_vaddr);
    return 1;
}

/* ------------------------------------------------------------ the table */

#define CACHE_SLOTS 4096 /* a power of two; 64 KiB, touched only by a profile */
#define CACHE_PROBES 16
/* key: the address looked up, with the table's generation in the top 16 bits (user
 * addresses on x86-64 fit in 47); 0: free; KEY_CLAIMED while its finder writes the
 * rule, which it publishes by storing the key after it (release), so that a reader
 * that sees a key sees that key's rule, or 0 (a miss) if a new generation is
 * clearing the table meanwhile. */
#define KEY_CLAIMED 1
static struct {
    _Atomic uint64_t key;
    _Atomic uint64_t rule;
} cache[CACHE_SLOTS];
static _Atomic uint64_t generation;
static _Atomic unsigned long long subs_seen;

/* The rule for pc from the tables of the object that holds it. */
static struct rule rule_uncached(uint64_t pc) {
    struct find_object f = {pc, NULL, 0};
    dl_iterate_phdr(find_object_cb, &f);
    return f.hdr != NULL ? rule_from_tables(f.hdr, pc) : rule_of_kind(RULE_END);
}

static struct rule rule_for(uint64_t pc, uint64_t gen) {
    uint64_t key = pc | gen << 48;
    uint64_t h = (pc * 0x9E3779B97F4A7C15ULL) >> 40;
    for (unsigned probe = 0; probe < CACHE_PROBES; probe++) {
        size_t i = (size_t)(h + probe) & (CACHE_SLOTS - 1);
        uint64_t k = atomic_load_explicit(&cache[i].key, memory_order_acquire);
        if (k == key) {
            uint64_t v = atomic_load_explicit(&cache[i].rule, memory_order_relaxed);
            if (v != 0) return rule_unpack(v);
            break; /* cleared by a new generation meanwhile: work it out */
        }
        if (k != 0) continue;
        struct rule r = rule_uncached(pc);
        if (atomic_compare_exchange_strong_explicit(&cache[i].key, &k, KEY_CLAIMED,
                                                    memory_order_acquire,
                                                    memory_order_relaxed)) {
            atomic_store_explicit(&cache[i].rule, rule_pack(r), memory_order_relaxed);
            atomic_store_explicit(&cache[i].key, key, memory_order_release);
        }
        return r;
    }
    return rule_uncached(pc);
}

/* The table's generation: a new one (old entries never match again) when an
 * object was removed since the last walk. */
static uint64_t current_generation(void) {
    struct find_object f = {0, NULL, 0};
    dl_iterate_phdr(find_object_cb, &f);
    if (f.subs != atomic_load_explicit(&subs_seen, memory_order_acquire)) {
        atomic_store_explicit(&subs_seen, f.subs, memory_order_release);
        atomic_fetch_add_explicit(&generation, 1, memory_order_acq_rel);
        for (size_t i = 0; i < CACHE_SLOTS; i++) { /* room for the new generation */
            atomic_store_explicit(&cache[i].rule, 0, memory_order_relaxed);
            atomic_store_explicit(&cache[i].key, 0, memory_order_release);
        }
    }
    return atomic_load_explicit(&generation, memory_order_acquire) & 0xffff;
}

/* A frame's stride is bounded: a CFA outside (sp, sp + FRAME_MAX] is taken as a
 * misread table, never followed. */
#define FRAME_MAX ((uint64_t)1 << 24)

/* The memo's words, for a walk that found a stack: return addresses always, fp's
 * saved values only if a later frame's CFA came from one. */
static void memo_add(hz_unwind_memo_t *m, uint64_t at, uint64_t val) {
    if (m->reads == HZ_UNWIND_READS) return; /* too deep to remember: see walk's end */
    m->read[m->reads].at = at;
    m->read[m->reads++].val = val;
}

/* The walk from pc, sp and fp, the registers at pc in the frame of the function that
 * expanded hz_unwind (whose frame stays while this one runs), written down in memo. */
int hz_unwind_walk(void **frames, int max, hz_unwind_memo_t *memo, uint64_t pc, uint64_t sp,
                   uint64_t fp) {
    const uint64_t start = pc;
    memo->pc = 0; /* none until this walk completes */
    memo->sp = sp;
    memo->fp = fp;
    memo->fp_read = false;
    memo->reads = 0;
    uint64_t gen = current_generation();
    /* Where fp was last restored from, until a rule uses it (0: fp is still the
     * register's value at the start, or already in the memo). */
    uint64_t fp_at_pending = 0;
    bool fp_restored = false;
    int n = 0;
    for (bool first = true; n < max; first = false) {
        /* A return address follows its call: look up the call (as libgcc does). */
        struct rule r = rule_for(first ? pc : pc - 1, gen);
        if (r.kind == RULE_END) break;
        if (r.kind == RULE_UNKNOWN) return -1;
        if (r.kind == RULE_RBP) { /* this step depends on fp's value: remember it */
            if (!fp_restored) memo->fp_read = true;
            else if (fp_at_pending != 0) memo_add(memo, fp_at_pending, fp);
            fp_at_pending = 0;
        }
        uint64_t cfa = (r.kind == RULE_RSP ? sp : fp) + (uint64_t)(int64_t)r.cfa_off;
        if (cfa <= sp || cfa - sp > FRAME_MAX || (cfa & 7) != 0) return -1;
        uint64_t ra_at = cfa + (uint64_t)((int64_t)r.ra_off8 * 8);
        uint64_t fp_at = cfa + (uint64_t)(int64_t)r.rbp_off;
        if (ra_at < sp || ra_at >= cfa || (r.rbp_off != 0 && (fp_at < sp || fp_at >= cfa)))
            return -1;
        pc = *(const uint64_t *)(uintptr_t)ra_at;
        memo_add(memo, ra_at, pc);
        if (r.rbp_off != 0) {
            fp = *(const uint64_t *)(uintptr_t)fp_at;
            fp_at_pending = fp_at;
            fp_restored = true;
        }
        sp = cfa;
        if (pc == 0) break;
        frames[n++] = (void *)(uintptr_t)pc;
    }
    if (memo->reads < HZ_UNWIND_READS) memo->pc = start;
    return n;
}

#endif
