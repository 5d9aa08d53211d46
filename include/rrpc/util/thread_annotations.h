// Clang thread-safety annotations (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html).
// Under clang with -Wthread-safety the compiler checks them: a field marked RRPC_GUARDED_BY(mu_)
// read without mu_ held, or a function marked RRPC_REQUIRES(mu_) called without it, is a compile
// error in the CI's clang stage. Under other compilers they expand to nothing.
//
//   class Counter {
//    public:
//     void Add(int n) RRPC_EXCLUDES(mu_) { MutexLock l(mu_); total_ += n; }
//    private:
//     void AddLocked(int n) RRPC_REQUIRES(mu_) { total_ += n; }
//     Mutex mu_;
//     int64_t total_ RRPC_GUARDED_BY(mu_) = 0;
//   };
#pragma once

#if defined(__clang__)
#define RRPC_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define RRPC_THREAD_ANNOTATION(x)
#endif

// On a class: instances are a lockable capability (a mutex).
#define RRPC_CAPABILITY(name) RRPC_THREAD_ANNOTATION(capability(name))
// On a class: an RAII object that holds a capability for its lifetime.
#define RRPC_SCOPED_CAPABILITY RRPC_THREAD_ANNOTATION(scoped_lockable)

// On a field: reading or writing it requires holding `mu`.
#define RRPC_GUARDED_BY(mu) RRPC_THREAD_ANNOTATION(guarded_by(mu))
// On a pointer field: the pointed-to data requires holding `mu`.
#define RRPC_PT_GUARDED_BY(mu) RRPC_THREAD_ANNOTATION(pt_guarded_by(mu))

// On a function: the caller must hold (REQUIRES) or must not hold (EXCLUDES) the capabilities.
#define RRPC_REQUIRES(...) RRPC_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define RRPC_EXCLUDES(...) RRPC_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

// On a function: it acquires / releases the capabilities (for lock types and lock helpers).
#define RRPC_ACQUIRE(...) RRPC_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RRPC_RELEASE(...) RRPC_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RRPC_TRY_ACQUIRE(...) RRPC_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))

// On a function: tells the analysis the capability is held from here on (checked at run time
// by the function itself, e.g. a DCHECK).
#define RRPC_ASSERT_CAPABILITY(x) RRPC_THREAD_ANNOTATION(assert_capability(x))
// On a function: it returns a reference to the capability `x`.
#define RRPC_RETURN_CAPABILITY(x) RRPC_THREAD_ANNOTATION(lock_returned(x))

// On a function: the analysis does not look inside. Every use says why in a comment.
#define RRPC_NO_THREAD_SAFETY_ANALYSIS RRPC_THREAD_ANNOTATION(no_thread_safety_analysis)
