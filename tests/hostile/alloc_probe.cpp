// Global operator new/delete for test_hostile: forward to malloc/free (so ASan still sees
// every allocation) and report sizes to alloc_probe.
#include "hostile/alloc_probe.hpp"

#include <cstdlib>
#include <new>

void* operator new(std::size_t n) {
    qforge::hostile::note_allocation(n);
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
    qforge::hostile::note_allocation(n);
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
// The nothrow forms too (std::stable_sort's temporary buffer uses them): their memory is
// released through the plain operator delete above, so they must come from malloc as well.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    qforge::hostile::note_allocation(n);
    return std::malloc(n ? n : 1);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
    qforge::hostile::note_allocation(n);
    return std::malloc(n ? n : 1);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
