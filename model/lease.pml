/*
 * lease.pml -- Promela model of ipcring's lease protocol (src/lease/) with thread ids that collide
 * across PID namespaces and processes killed at every step, probes included.
 *
 * What is modelled (one reader entry; docs/protocol.md "Liveness" is the prose):
 *   - the robust mutex's lock word: owner TID (0: unowned) and the OWNER_DIED bit;
 *   - glibc's robust-list bookkeeping per thread: `onlist` (the mutex is on its robust list) and
 *     `pending` (list_op_pending points at it), set and cleared in glibc's order by trylock
 *     (pending, CAS, enqueue, clear pending) and unlock (pending, dequeue, store 0, clear pending);
 *   - the kernel at a thread's death (kernel/futex/core.c, handle_futex_death): for the mutex on
 *     its list and for its pending one, if the lock word's TID equals the dying thread's TID *in its
 *     own namespace*, the word becomes OWNER_DIED with TID 0 (a pending op on an unowned word only
 *     wakes); then, later in do_exit, its file locks are released (exit_mm before exit_files);
 *   - the repair lock (flock): held by at most one process, released by the kernel at death;
 *   - the lease word: state (FREE/ACTIVE) and generation.
 * Every process has the same TID when COLLIDE is 1 (each is the first thread of its own PID
 * namespace, as in containers): exactly the case a PID-based check gets wrong.
 *
 * Processes (each may be SIGKILLed before any of its steps while the kill budget LIVES lasts):
 *   Owner (0), Attacher (1): attach (take the entry), hold it, detach.
 *   Prober (2): inspect() / a waiting reader: probes the lease PROBES times.
 *   Reaper (3): the producer's reap or `ringdump reap`: reaps the entry if its owner is dead.
 *
 * Properties (assertions, checked after every step of every process):
 *   (a) a live owner is never declared dead: while a process that completed its attach is alive
 *       and has not started to detach, the lock word is its TID without OWNER_DIED and the lease
 *       word is (its generation, ACTIVE);
 *   (b) at most one process believes it holds the mutex.
 *
 * Variants: -DBROKEN_TRYLOCK_PROBE: the probe, the reap and the attach of layout 2 (trylock on a
 * mutex a live owner may hold, no repair lock): must be refuted (with -DDIEMASK=4 only the prober
 * dies: killed inside its trylock, it makes the kernel mark the live owner with its TID dead).
 * -DNO_REPAIR_LOCK: the read-only probe, but attach, detach and reap without the repair lock: must be
 * refuted (a reap decided on one owner's entry lands on the next owner's, or an attacher locks the
 * mutex while a detacher's glibc unlock still has it pending). -DCOLLIDE=0 with the broken probe
 * verifies: the failure needs colliding thread ids, which is why it went unnoticed.
 */

#ifndef COLLIDE
#define COLLIDE 1
#endif
#ifndef LIVES
#define LIVES 1
#endif
#ifndef DIEMASK
#define DIEMASK 15 /* bit p: process p may be killed */
#endif
#ifndef PROBES
#define PROBES 2
#endif
#ifndef BROKEN_TRYLOCK_PROBE
#define BROKEN_TRYLOCK_PROBE 0
#endif
#ifndef NO_REPAIR_LOCK
#define NO_REPAIR_LOCK 0
#endif

#define NP 4
#define NONE 255
#define FREE 0
#define ACTIVE 1
#define TAKEN 0
#define BUSY 1
#define OWNERDEAD 2

byte tid[NP];
byte word_tid;      /* lock word: owner TID, 0 = unowned */
bit word_died;      /* lock word: FUTEX_OWNER_DIED */
bit onlist[NP];     /* the mutex is on process p's robust list */
bit pending[NP];    /* process p's list_op_pending points at the mutex */
bit alive[NP];
bit believes[NP];   /* p believes it holds the mutex */
bit protected[NP];  /* p completed attach and has not begun to detach */
byte mygen[NP];
byte flock_holder = NONE;
byte lstate = FREE;
byte lgen = 0;
byte lives = LIVES;

hidden byte live_owner_never_declared_dead;  /* (a) */
hidden byte one_holder;                      /* (b) */
hidden byte q;
hidden byte holders;

inline check() {
  holders = 0;
  for (q : 0 .. NP - 1) {
    live_owner_never_declared_dead =
        !(protected[q] && alive[q]) ||
        (word_died == 0 && word_tid == tid[q] && lstate == ACTIVE && lgen == mygen[q]);
    assert(live_owner_never_declared_dead);
    holders = holders + believes[q];
  }
  one_holder = holders <= 1;
  assert(one_holder)
}

/* The kernel at process p's death: robust list and pending op first, file locks after. */
inline kernel_death(p) {
  if
  :: onlist[p] && word_tid == tid[p] -> word_tid = 0; word_died = 1
  :: else -> skip
  fi;
  if
  :: pending[p] && word_tid != 0 && word_tid == tid[p] -> word_tid = 0; word_died = 1
  :: else -> skip
  fi;
  onlist[p] = 0;
  pending[p] = 0;
  believes[p] = 0;
  if
  :: flock_holder == p -> flock_holder = NONE
  :: else -> skip
  fi;
  alive[p] = 0;
  printf("process %d dies (SIGKILL)\n", p)
}

/* A step of process p: it may be killed first (then it jumps to `dead`). */
#define STEP(p, action) \
  if \
  :: atomic { lives > 0 && ((DIEMASK >> p) & 1) -> lives--; kernel_death(p); check() }; goto dead \
  :: atomic { action; check() } \
  fi

inline glibc_trylock(p, rc) {
  STEP(p, pending[p] = 1);
  STEP(p, if
          :: word_tid == 0 && !word_died -> word_tid = tid[p]; rc = TAKEN; believes[p] = 1
          :: word_died -> word_tid = tid[p]; word_died = 0; rc = OWNERDEAD; believes[p] = 1
          :: else -> rc = BUSY
          fi);
  STEP(p, if :: rc != BUSY -> onlist[p] = 1 :: else -> skip fi);
  STEP(p, pending[p] = 0)
}

inline glibc_unlock(p) {
  STEP(p, pending[p] = 1; believes[p] = 0);
  STEP(p, onlist[p] = 0);
  STEP(p, word_tid = 0);
  STEP(p, pending[p] = 0)
}

inline repair_lock(p) {
#if NO_REPAIR_LOCK || BROKEN_TRYLOCK_PROBE
  skip
#else
  STEP(p, flock_holder == NONE -> flock_holder = p)
#endif
}
inline repair_unlock(p) {
#if NO_REPAIR_LOCK || BROKEN_TRYLOCK_PROBE
  skip
#else
  STEP(p, flock_holder = NONE)
#endif
}

/* Attach, hold, detach (Reader::attach and ~ReaderCore through src/lease/). */
inline lease_user(p) {
  byte rc = BUSY;
  bit usable;
  repair_lock(p);
#if BROKEN_TRYLOCK_PROBE
  /* layout 2: trylock whatever the lock word says */
  usable = 1;
#else
  /* read-only: free or dead entries only, never one a live owner holds */
  STEP(p, usable = (lstate == FREE || lstate == ACTIVE) && !(word_tid != 0 && !word_died));
#endif
  if
  :: usable ->
     glibc_trylock(p, rc);
     if
     :: rc != BUSY ->
        STEP(p, lgen++; lstate = ACTIVE; mygen[p] = lgen; protected[p] = 1;
                printf("P%d attached (generation %d)\n", p, lgen))
     :: else -> skip
     fi
  :: else -> skip
  fi;
  repair_unlock(p);
  if
  :: rc != BUSY ->
     /* detach */
     repair_lock(p);
     STEP(p, protected[p] = 0);
     glibc_unlock(p);
     STEP(p, if :: lstate == ACTIVE && lgen == mygen[p] -> lgen++; lstate = FREE :: else -> skip fi);
     repair_unlock(p)
  :: else -> skip
  fi
}

proctype Owner() {
  lease_user(0);
dead:
  skip
}

proctype Attacher() {
  lease_user(1);
dead:
  skip
}

proctype Prober() {
  byte k;
  byte rc = BUSY;
  for (k : 1 .. PROBES) {
#if BROKEN_TRYLOCK_PROBE
    /* layout 2's probe_alive: trylock; a dead owner's mutex is made consistent and unlocked */
    glibc_trylock(2, rc);
    if
    :: rc != BUSY -> glibc_unlock(2)
    :: else -> skip
    fi
#else
    STEP(2, rc = ((word_died || word_tid == 0) -> BUSY : TAKEN)) /* one load; nothing written */
#endif
  }
dead:
  skip
}

proctype Reaper() {
  bit dead_owner;
#if BROKEN_TRYLOCK_PROBE
  byte rc = BUSY;
  STEP(3, dead_owner = (lstate == ACTIVE));
  if
  :: dead_owner ->
     glibc_trylock(3, rc);
     if
     :: rc != BUSY ->
        STEP(3, if :: lstate == ACTIVE -> lgen++; lstate = FREE :: else -> skip fi);
        glibc_unlock(3)
     :: else -> skip
     fi
  :: else -> skip
  fi;
#else
  /* read-only probe; only an ACTIVE entry whose lock word says dead (or unowned) is reaped, and
     only under the repair lock, re-checked there */
  STEP(3, dead_owner = lstate == ACTIVE && (word_died || word_tid == 0));
  if
  :: dead_owner ->
     repair_lock(3);
     STEP(3, if
             :: lstate == ACTIVE && (word_died || word_tid == 0) -> lgen++; lstate = FREE;
                printf("reaper frees the entry (generation %d)\n", lgen)
             :: else -> skip
             fi);
     repair_unlock(3)
  :: else -> skip
  fi;
#endif
dead:
  skip
}

init {
  atomic {
    byte p;
    for (p : 0 .. NP - 1) {
      alive[p] = 1;
#if COLLIDE
      tid[p] = 1;     /* the first thread of every namespace */
#else
      tid[p] = p + 1;
#endif
    }
    run Owner();
    run Attacher();
    run Prober();
    run Reaper()
  }
}
