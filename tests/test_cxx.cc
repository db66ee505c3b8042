// test_cxx.cc - the C++ allocation operators and the standard containers.
//
// Exercises every form of operator new/delete (plain, array, nothrow, sized,
// aligned, aligned+sized, aligned+nothrow), checks alignment and the failure
// behaviour (std::bad_alloc, nullptr for nothrow), and runs container-heavy
// work on several threads, comparing each thread's checksum with the same work
// done on the main thread.  Under hakozuna, hz_usable_size() must recognise a
// block from new[], which shows that the operators reach hakozuna.
#include "hz_test.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

// Keeps results observable so that allocations are not optimised away.
void *volatile sink;

size_t opaque(size_t v)
{
    volatile size_t x = v;
    return x;
}

bool aligned(const void *p, size_t a)
{
    return (reinterpret_cast<uintptr_t>(p) & (a - 1)) == 0;
}

// Sized deallocation is on by default in g++ for C++14 and later; a compiler
// without it (clang before 19) gets the unsized forms.
#if defined(__cpp_sized_deallocation)
void delete_sized(void *p, size_t n) { ::operator delete(p, n); }
void delete_array_sized(void *p, size_t n) { ::operator delete[](p, n); }
void delete_sized_aligned(void *p, size_t n, std::align_val_t al) { ::operator delete(p, n, al); }
void delete_array_sized_aligned(void *p, size_t n, std::align_val_t al)
{
    ::operator delete[](p, n, al);
}
#else
void delete_sized(void *p, size_t) { ::operator delete(p); }
void delete_array_sized(void *p, size_t) { ::operator delete[](p); }
void delete_sized_aligned(void *p, size_t, std::align_val_t al) { ::operator delete(p, al); }
void delete_array_sized_aligned(void *p, size_t, std::align_val_t al)
{
    ::operator delete[](p, al);
}
#endif

struct alignas(64) A64 {
    unsigned char c[64];
};
struct alignas(4096) A4K {
    unsigned char c[100];
};
struct Obj {
    uint64_t v[5];
    explicit Obj(uint64_t x = 1)
    {
        for (auto &e : v)
            e = x++;
    }
};

void test_plain()
{
    for (int round = 0; round < 2000; round++) {
        Obj *o = new Obj(static_cast<uint64_t>(round));
        CHECK(aligned(o, 16), "new Obj not 16-byte aligned");
        sink = o;
        CHECK(o->v[4] == static_cast<uint64_t>(round) + 4, "new Obj: constructor result lost");
        delete o;

        size_t n = opaque(static_cast<size_t>(1 + round % 700));
        char *a = new char[n];
        CHECK(aligned(a, 16), "new char[%zu] not 16-byte aligned", n);
        std::fill(a, a + n, static_cast<char>(round));
        sink = a;
        delete[] a;

        Obj *arr = new Obj[n % 37 + 1];
        sink = arr;
        delete[] arr;

        int *ni = new (std::nothrow) int[n];
        CHECK(ni != nullptr, "new (nothrow) int[%zu] returned nullptr", n);
        ni[n - 1] = 3;
        sink = ni;
        delete[] ni;

        Obj *no = new (std::nothrow) Obj(7);
        CHECK(no != nullptr && no->v[0] == 7, "new (nothrow) Obj failed");
        delete no;
    }
}

void test_operator_forms()
{
    for (size_t n = 1; n <= (size_t(1) << 22); n = n * 3 + 1) {
        size_t sz = opaque(n);
        void *p = ::operator new(sz);
        CHECK(p && aligned(p, 16), "operator new(%zu)", sz);
        std::memset(p, 0x11, sz);
        delete_sized(p, sz);

        p = ::operator new[](sz);
        CHECK(p && aligned(p, 16), "operator new[](%zu)", sz);
        std::memset(p, 0x22, sz);
        delete_array_sized(p, sz);

        p = ::operator new(sz, std::nothrow);
        CHECK(p != nullptr, "operator new(%zu, nothrow)", sz);
        std::memset(p, 0x33, sz);
        ::operator delete(p, std::nothrow);

        p = ::operator new[](sz, std::nothrow);
        CHECK(p != nullptr, "operator new[](%zu, nothrow)", sz);
        std::memset(p, 0x44, sz);
        ::operator delete[](p, std::nothrow);

        p = ::operator new(sz);
        std::memset(p, 0x55, sz);
        ::operator delete(p); // unsized
        p = ::operator new[](sz);
        std::memset(p, 0x66, sz);
        ::operator delete[](p);
    }
}

void test_aligned()
{
    for (int round = 0; round < 300; round++) {
        A64 *a = new A64;
        CHECK(aligned(a, 64), "new A64 = %p not 64-byte aligned", static_cast<void *>(a));
        a->c[63] = 1;
        sink = a;
        delete a;

        A64 *aa = new A64[static_cast<size_t>(round % 17 + 1)];
        CHECK(aligned(aa, 64), "new A64[] not 64-byte aligned");
        sink = aa;
        delete[] aa;

        A4K *b = new A4K;
        CHECK(aligned(b, 4096), "new A4K = %p not 4096-byte aligned", static_cast<void *>(b));
        b->c[99] = 2;
        sink = b;
        delete b;

        A4K *bb = new A4K[3];
        CHECK(aligned(bb, 4096), "new A4K[3] not 4096-byte aligned");
        sink = bb;
        delete[] bb;

        A4K *bn = new (std::nothrow) A4K;
        CHECK(bn && aligned(bn, 4096), "new (nothrow) A4K");
        delete bn;
    }
    // Explicit aligned operators, every power of two from 16 B to 64 KiB.
    for (size_t al = 16; al <= 65536; al *= 2) {
        const size_t sizes[] = {1, al - 1, al, 3 * al + 5, 100000};
        for (size_t sz : sizes) {
            size_t n = opaque(sz);
            void *p = ::operator new(n, std::align_val_t(al));
            CHECK(aligned(p, al), "operator new(%zu, align %zu) = %p", n, al, p);
            std::memset(p, 0x77, n);
            delete_sized_aligned(p, n, std::align_val_t(al));

            p = ::operator new[](n, std::align_val_t(al));
            CHECK(aligned(p, al), "operator new[](%zu, align %zu) = %p", n, al, p);
            std::memset(p, 0x78, n);
            ::operator delete[](p, std::align_val_t(al));

            p = ::operator new(n, std::align_val_t(al), std::nothrow);
            CHECK(p && aligned(p, al), "operator new(%zu, align %zu, nothrow)", n, al);
            std::memset(p, 0x79, n);
            ::operator delete(p, std::align_val_t(al), std::nothrow);

            p = ::operator new[](n, std::align_val_t(al), std::nothrow);
            CHECK(p && aligned(p, al), "operator new[](%zu, align %zu, nothrow)", n, al);
            std::memset(p, 0x7a, n);
            delete_array_sized_aligned(p, n, std::align_val_t(al));

            p = ::operator new[](n, std::align_val_t(al), std::nothrow);
            CHECK(p && aligned(p, al), "operator new[](%zu, align %zu, nothrow)", n, al);
            std::memset(p, 0x7b, n);
            ::operator delete[](p, std::align_val_t(al), std::nothrow);
        }
    }
    void *p = ::operator new(opaque(1000), std::align_val_t(256));
    CHECK(aligned(p, 256), "operator new(1000, align 256) = %p", p);
    ::operator delete(p, std::align_val_t(256));

    // Containers of over-aligned types use the aligned operators too.
    std::vector<A64> v;
    for (int i = 0; i < 1000; i++) {
        v.emplace_back();
        CHECK(aligned(v.data(), 64), "std::vector<A64> storage not 64-byte aligned");
    }
    auto sp = std::make_shared<A4K>();
    CHECK(aligned(sp.get(), 4096), "make_shared<A4K> not 4096-byte aligned");
    auto up = std::make_unique<A4K[]>(5);
    CHECK(aligned(up.get(), 4096), "make_unique<A4K[]> not 4096-byte aligned");
}

void test_failures(int hz)
{
    const size_t huge[] = {SIZE_MAX, SIZE_MAX / 2, size_t(1) << 62, SIZE_MAX - 4096};
    for (size_t h : huge) {
        size_t n = opaque(h);
        bool thrown = false;
        try {
            sink = ::operator new(n);
        } catch (const std::bad_alloc &) {
            thrown = true;
        }
        CHECK(thrown, "operator new(%zu) did not throw std::bad_alloc", n);

        thrown = false;
        try {
            sink = new char[n];
        } catch (const std::bad_alloc &) { // bad_array_new_length derives from it
            thrown = true;
        }
        CHECK(thrown, "new char[%zu] did not throw", n);

        // GCC 12's libstdc++ rounds the size up to the alignment without an
        // overflow check (SIZE_MAX becomes 0), so the aligned forms are only
        // held to this under hakozuna, which defines them itself.
        if (hz) {
            thrown = false;
            try {
                sink = ::operator new[](n, std::align_val_t(64));
            } catch (const std::bad_alloc &) {
                thrown = true;
            }
            CHECK(thrown, "operator new[](%zu, align 64) did not throw", n);
            void *q = ::operator new(n, std::align_val_t(4096), std::nothrow);
            CHECK(q == nullptr, "operator new(%zu, align 4096, nothrow) did not return nullptr",
                  n);
        }

        void *p = ::operator new(n, std::nothrow);
        CHECK(p == nullptr, "operator new(%zu, nothrow) did not return nullptr", n);
        p = ::operator new[](n, std::nothrow);
        CHECK(p == nullptr, "operator new[](%zu, nothrow) did not return nullptr", n);
        char *c = new (std::nothrow) char[n];
        CHECK(c == nullptr, "new (nothrow) char[%zu] did not return nullptr", n);
    }
    // Alignments no block can have: the largest powers of two once made the size
    // checks wrap and the allocator unmap most of the address space.
    const size_t sizes[] = {1, 100, 8193, size_t(1) << 20};
    for (int shift = 62; shift <= 63; shift++) {
        auto al = static_cast<std::align_val_t>(opaque(size_t(1) << shift));
        for (size_t n : sizes) {
            void *q = ::operator new(n, al, std::nothrow);
            CHECK(q == nullptr, "operator new(%zu, align 2^%d, nothrow) = %p", n, shift, q);
            bool thrown = false;
            try {
                sink = ::operator new[](n, al);
            } catch (const std::bad_alloc &) {
                thrown = true;
            }
            CHECK(thrown, "operator new[](%zu, align 2^%d) did not throw", n, shift);
        }
    }
    // Everything still works afterwards.
    std::string s(100000, 'x');
    CHECK(s.size() == 100000 && s[99999] == 'x', "allocation after failures");
}

int handler_calls;
void throwing_handler()
{
    handler_calls++;
    throw std::bad_alloc();
}
void giving_up_handler() // frees nothing: the next try fails, and then there is no handler
{
    handler_calls++;
    std::set_new_handler(nullptr);
}

// A new-handler that throws std::bad_alloc (a conforming one) or uninstalls itself:
// the nothrow forms return nullptr, the plain ones throw.  The nothrow forms once let
// the handler's exception out, which ended the program (they are noexcept).
void test_new_handler()
{
    const size_t n = opaque(size_t(1) << 62);
    const auto al = static_cast<std::align_val_t>(opaque(64));
    for (int round = 0; round < 2; round++) {
        std::new_handler h = round == 0 ? throwing_handler : giving_up_handler;
        const char *name = round == 0 ? "a throwing" : "a giving-up";
        for (int form = 0; form < 4; form++) {
            handler_calls = 0;
            std::set_new_handler(h);
            void *p = form == 0   ? ::operator new(n, std::nothrow)
                      : form == 1 ? ::operator new[](n, std::nothrow)
                      : form == 2 ? ::operator new(n, al, std::nothrow)
                                  : ::operator new[](n, al, std::nothrow);
            CHECK(p == nullptr, "nothrow new (form %d) with %s new_handler = %p", form, name, p);
            CHECK(handler_calls == 1, "nothrow new (form %d): %s new_handler called %d times",
                  form, name, handler_calls);
            handler_calls = 0;
            std::set_new_handler(h);
            bool thrown = false;
            try {
                sink = form < 2 ? ::operator new(n) : ::operator new(n, al);
            } catch (const std::bad_alloc &) {
                thrown = true;
            }
            CHECK(thrown && handler_calls == 1,
                  "operator new (form %d) with %s new_handler: thrown %d, handler called %d times",
                  form, name, thrown, handler_calls);
        }
    }
    std::set_new_handler(nullptr);
}

uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = static_cast<const unsigned char *>(data);
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

// Deterministic, allocation-heavy work; returns a checksum of its results.
uint64_t workload(uint64_t seed, std::vector<std::string> **leftover)
{
    uint64_t rng = seed;
    std::map<std::string, std::vector<uint32_t>> m;
    std::unordered_map<uint64_t, std::string> um;
    std::vector<std::string> strs;
    for (uint32_t i = 0; i < 120000; i++) {
        uint64_t r = hz_test_rand(&rng);
        std::string key = "key-" + std::to_string(r % 3000);
        m[key].push_back(i);
        um[r % 7919] = std::string(static_cast<size_t>(r % 300), static_cast<char>('a' + r % 26));
        strs.emplace_back(std::to_string(r) + std::string(static_cast<size_t>(r % 64), '#'));
        if (strs.size() > 2000) {
            std::sort(strs.begin(), strs.end());
            strs.erase(strs.begin(), strs.begin() + 1000);
        }
        if (r % 97 == 0)
            m.erase(m.begin());
        if (r % 89 == 0)
            um.erase(r % 7919 + 1);
    }
    uint64_t h = 0xcbf29ce484222325ull;
    for (const auto &kv : m) {
        h = fnv(h, kv.first.data(), kv.first.size());
        h = fnv(h, kv.second.data(), kv.second.size() * sizeof(uint32_t));
    }
    // unordered_map: combine order-independently
    uint64_t uh = 0;
    for (const auto &kv : um)
        uh += fnv(kv.first, kv.second.data(), kv.second.size());
    std::sort(strs.begin(), strs.end());
    for (const auto &s : strs)
        h = fnv(h, s.data(), s.size());
    if (leftover) // handed to another thread, which destroys it
        *leftover = new std::vector<std::string>(strs.begin(), strs.begin() + 500);
    return h ^ uh;
}

uint64_t test_threads()
{
    const int n = 4;
    uint64_t got[n] = {};
    std::vector<std::string> *left[n] = {};
    std::vector<std::thread> ts;
    for (int i = 0; i < n; i++)
        ts.emplace_back([&got, &left, i] { got[i] = workload(1000 + static_cast<uint64_t>(i), &left[i]); });
    for (auto &t : ts)
        t.join();
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        uint64_t want = workload(1000 + static_cast<uint64_t>(i), nullptr);
        CHECK(got[i] == want, "thread %d checksum %016llx, main thread %016llx", i,
              static_cast<unsigned long long>(got[i]), static_cast<unsigned long long>(want));
        CHECK(left[i] && left[i]->size() == 500, "leftover vector of thread %d damaged", i);
        for (const auto &s : *left[i])
            total = fnv(total, s.data(), s.size());
        delete left[i]; // allocated by another thread
        total ^= got[i];
    }
    return total;
}

} // namespace

int main()
{
    int hz = hz_test_require_loaded();
    double t0 = hz_test_now();
    test_plain();
    test_operator_forms();
    test_aligned();
    test_failures(hz);
    test_new_handler();
    uint64_t sum = test_threads();

    if (hz) {
        char *p = new char[100];
        sink = p;
        size_t u = hz_test_usable_size(p);
        CHECK(u != static_cast<size_t>(-1), "hz_usable_size is not exported");
        CHECK(u >= 100, "hz_usable_size(new char[100]) = %zu: operator new[] does not reach hakozuna",
              u);
        delete[] p;
        A4K *a = new A4K;
        u = hz_test_usable_size(a);
        CHECK(u >= sizeof(A4K), "hz_usable_size(new A4K) = %zu: aligned new does not reach hakozuna",
              u);
        delete a;
    }
    std::printf("test_cxx: checksum %016llx (%.2f s)\n", static_cast<unsigned long long>(sum),
                hz_test_now() - t0);
    return 0;
}
