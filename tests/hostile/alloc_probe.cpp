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
