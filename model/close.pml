/* close.pml -- a CUDA producer's close against readers that map its buffers (docs/cuda.md,
 * "Close order"): one slot, its `mapped` bits, the producer's bounded wait and its decision to
 * free or keep the buffer. Readers may die at any step (their mappings go with their process; the
 * producer's reap during its wait clears their bits), stall for longer than the wait (modelled
 * by the wait ending at any moment), and run kernels on the buffer that end at any time. Spin's
 * sequential consistency stands for the C++'s two acq_rel RMWs on the `mapped` word (the reader's
 * fetch_or of its bit, M1, before its load of the lease; the producer's fetch_or(0), M3, after its
 * closed lease): ordered in the word's modification order, one sees the other, as here.
 *
 * Checked (asserts):
 *   never_freed_while_mapped  the producer never frees the buffer while a live reader maps it,
 *                             and no reader maps it after it was freed
 *   copy_destroyed_first      a reader destroys its copy of the slot's event only while the
 *                             producer still has its own (never after the exporter destroyed it)
 * Options, each refuted as never_freed_while_mapped: -DBROKEN_LEASE_FIRST (the reader looks at
 * the lease before it sets its bit), -DBROKEN_CLEAR_FIRST (the reader clears its bit before it
 * closes the mapping), -DBROKEN_NO_WAIT (the producer frees without looking at the bits).
 */
#define NR 2            /* readers */

bit closed = 0;         /* the producer lease reads closed */
bit decided = 0;        /* the producer decided and withdrew the slot's handles */
bit freed = 0;          /* the buffer (and the slot's event) were freed by the producer */
bit mapped[NR];         /* the slot's `mapped` bits */
bit has_map[NR];        /* ground truth: reader r's process has the buffer mapped */
bit kernel[NR];         /* a kernel of reader r still reads the buffer */
bit dead[NR];
hidden byte never_freed_while_mapped;
hidden byte copy_destroyed_first;

inline check_not_freed_while_mapped() {
  never_freed_while_mapped = !freed || (has_map[0] == 0 && has_map[1] == 0);
  assert(never_freed_while_mapped)
}

/* Any step of a reader may be its last: its mappings and kernels go with the process. */
inline maybe_die(r) {
  if
  :: atomic { dead[r] = 1; has_map[r] = 0; kernel[r] = 0 }; goto gone
  :: skip
  fi
}

/* Close the mapping once no kernel of ours reads it, then clear the bit (release). */
inline let_go(r) {
  if
  :: has_map[r] == 1 && kernel[r] == 0 ->
#ifdef BROKEN_CLEAR_FIRST
     mapped[r] = 0;
     maybe_die(r);
#endif
     /* The event copy: destroyed only while the lease reads closed and the handles are still
      * the producer's; otherwise left (a leak, never an operation on a destroyed event). */
     atomic {
       if
       :: decided == 0 -> copy_destroyed_first = !freed; assert(copy_destroyed_first)
       :: else -> skip
       fi;
       has_map[r] = 0
     };
     maybe_die(r);
     mapped[r] = 0
  :: else -> skip   /* a kernel still reads it: the mapping (and the bit) stay */
  fi
}

proctype reader(byte r) {
  /* First frame in the slot: the handles must still be the producer's. */
  if
  :: decided == 1 -> goto done
  :: else -> skip
  fi;
  maybe_die(r);
#ifdef BROKEN_LEASE_FIRST
  if
  :: closed == 1 -> goto done
  :: else -> skip
  fi;
  maybe_die(r);
  mapped[r] = 1;
#else
  mapped[r] = 1;       /* (M1) */
  maybe_die(r);
  if                   /* (M2) */
  :: closed == 1 -> mapped[r] = 0; goto done
  :: else -> skip
  fi;
#endif
  maybe_die(r);
  atomic { has_map[r] = 1; check_not_freed_while_mapped() };   /* cudaIpcOpenMemHandle */
  maybe_die(r);
  kernel[r] = 1;       /* its kernel reads the frame; the release fence follows it */
  maybe_die(r);
  /* Reads on until it sees the end (or stalls past the producer's wait: the wait may end at any
   * moment), then lets go, possibly several times while its kernel runs. */
  (closed == 1);
  maybe_die(r);
  do
  :: let_go(r); maybe_die(r)
  :: has_map[r] == 0 -> break
  :: break         /* detaches with its kernel running: the mapping stays for good */
  od;
done:
gone:
  skip
}

/* The GPU: a reader's kernel ends at any time. */
active proctype gpu() {
  do
  :: kernel[0] == 1 -> kernel[0] = 0
  :: kernel[1] == 1 -> kernel[1] = 0
  :: timeout -> break
  od
}

active proctype producer() {
  bit quiet = 0;
  closed = 1;          /* the closed lease; its reads of the bits below are (M3) */
#ifdef BROKEN_NO_WAIT
  quiet = 1;
#else
  do
  :: mapped[0] == 0 && mapped[1] == 0 -> quiet = 1; break
  :: dead[0] == 1 -> mapped[0] = 0   /* the reap of a dead reader clears its bits */
  :: dead[1] == 1 -> mapped[1] = 0
  :: break                           /* the 2 s bound: whatever is still mapped is kept */
  od;
#endif
  decided = 1;
  if
  :: quiet == 1 -> atomic { freed = 1; check_not_freed_while_mapped() }
  :: else -> skip     /* kept allocated until the process exits */
  fi
}

init {
  atomic {
    run reader(0);
    run reader(1)
  }
}
