// Global operator new/delete for test_hostile: forward to malloc/free (so ASan still sees
// every allocation) and report sizes to alloc_probe (requested sizes for largest(), usable
// sizes of live blocks for peak()).
#include "hostile/alloc_probe.hpp"

#include <malloc.h>

#include <cstdlib>
#include <new>

namespace {
// Not inlined into the operators: where the folder compiles as one TU (QFORGE_UNITY_TESTS), g++
// would otherwise see free() applied to memory from operator new (-Wmismatched-new-delete).
[[gnu::noinline]] void* allocate(std::size_t n) noexcept {
    qforge::hostile::note_allocation(n);
    void* p = std::malloc(n ? n : 1);
    if (p) qforge::hostile::note_block(malloc_usable_size(p));
    return p;
}
[[gnu::noinline]] void release(void* p) noexcept {
    if (p) qforge::hostile::note_release(malloc_usable_size(p));
    std::free(p);
}
}  // namespace

void* operator new(std::size_t n) {
    if (void* p = allocate(n)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
    if (void* p = allocate(n)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t) noexcept { release(p); }
// The nothrow forms too (std::stable_sort's temporary buffer uses them): their memory is
// released through the plain operator delete above, so they must come from malloc as well.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }
