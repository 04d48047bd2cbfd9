/* fill.pml -- the VMM write-done word (docs/cuda.md, "Two ways to share a buffer", V1-V3): one
 * slot, a producer that publishes frames into it and may die at any step, its GPU stream (the
 * fill, then the write of the frame's sequence into `filled`), one reader that claims each frame,
 * looks at the word (V2) and either finds it complete, or queues a wait on its stream, or reports
 * producer_gone; the reader's GPU stream (the wait, then its kernel); and the reader's watchdog,
 * which raises the word to ABANDON once the producer is dead (V3). A dying producer's queued
 * write may still land after its death, or never (the kernel's teardown decides).
 *
 * Checked (asserts):
 *   complete_when_told       a reader kernel that runs because the word reached its frame's
 *                            sequence (not ABANDON) runs after that frame's fill; so does one
 *                            that runs because the CPU load found it complete
 *   no_stream_waits_forever  when nothing else can happen, no reader stream is still waiting
 * Options, each refuted: -DBROKEN_WRITE_FIRST (the producer's stream writes the word before the
 * fill ends) as complete_when_told; -DBROKEN_NO_WATCHDOG (nobody raises a dead producer's word) and
 * -DBROKEN_ONCE (the watchdog forgets a wait once it raised the word, and a late write of the
 * frame before lowers it again) as no_stream_waits_forever.
 */
#define MAXSEQ 2
#define ABANDON 7       /* kFilledAbandoned: above every sequence */

byte filled = 0;        /* CudaSlot::filled */
byte published = 0;     /* the slot's published sequence (0: none) */
bit held = 0;           /* the reader holds the slot's frame (the producer may not refill it) */
bit pdead = 0;          /* the producer died: its lease reads dead */
byte fill_queued = 0;   /* producer stream: the fill of this sequence is queued (0: none) */
byte fill_done = 0;     /* ground truth: the newest sequence whose fill completed */
byte write_queued = 0;  /* producer stream: the write of this sequence into `filled` is queued */
byte wait_target = 0;   /* reader stream: a wait for `filled` >= this is queued (0: none) */
bit kernel_queued = 0;  /* reader stream: its kernel, after the wait */
byte kernel_seq = 0;    /* the frame the kernel reads */
bit kernel_trusts = 0;  /* the kernel was told the frame is complete (not abandoned) */
bit reader_done = 0;
bit watched = 0;        /* the watchdog watches the queued wait (fill_waits_) */
hidden byte complete_when_told;
hidden byte no_stream_waits_forever;

inline maybe_die() {
  if
  :: pdead = 1; goto dead
  :: skip
  fi
}

active proctype producer() {
  byte seq = 1;
  do
  :: seq <= MAXSEQ ->
     /* P1: the claim, only of a slot no reader holds and whose release fence completed (the
      * reader's kernel is done); readers cannot claim it until it is published again. */
     atomic { (held == 0 && kernel_queued == 0) -> published = 0 };
     maybe_die();
     atomic { fill_queued = seq; write_queued = seq };  /* the fill, then V1, on its stream */
     maybe_die();
     published = seq;                    /* P2 */
     maybe_die();
     seq++
  :: else -> break
  od;
dead:
  skip
}

/* The producer's stream: the fill, then the write (after a fence), in stream order. It stops when
 * the producer dies, except that a write already behind a finished fill may still land (or never:
 * the context's teardown decides). */
byte pending_write = 0;  /* the fill of this sequence ended; its write has not landed yet */

active proctype producer_gpu() {
  do
  :: fill_queued != 0 && pdead == 0 && pending_write == 0 ->
#ifdef BROKEN_WRITE_FIRST
     atomic { filled = write_queued; write_queued = 0 };
     atomic { fill_done = fill_queued; fill_queued = 0 }
#else
     atomic { fill_done = fill_queued; fill_queued = 0; pending_write = write_queued;
              write_queued = 0 }
#endif
  :: pending_write != 0 -> atomic { filled = pending_write; pending_write = 0 }
  :: pdead == 1 -> break
  :: reader_done == 1 && fill_queued == 0 && pending_write == 0 -> break
  od
}

active proctype reader() {
  byte last = 0;
  byte seq;
  byte w;
  do
  :: atomic { published > last && held == 0 && kernel_queued == 0 ->
              seq = published; held = 1 }      /* R3: the claim */
     last = seq;
     w = filled;                                /* V2: the acquire load */
     if
     :: w != ABANDON && w >= seq ->
        atomic { kernel_seq = seq; kernel_trusts = 1; kernel_queued = 1 }
     :: w == ABANDON || (w < seq && pdead == 1) ->
        skip                                    /* producer_gone: released unread */
     :: w < seq && pdead == 0 ->
        atomic { wait_target = seq; watched = 1; kernel_seq = seq; kernel_trusts = 1;
                 kernel_queued = 1 }
     fi;
     held = 0                                   /* release: the fence follows the kernel */
  :: last == MAXSEQ -> break
  :: pdead == 1 && published <= last -> break   /* nothing more will come */
  od;
  reader_done = 1
}

/* The reader's stream: the wait, then the kernel. */
active proctype reader_gpu() {
  do
  :: atomic {
       kernel_queued == 1 && (wait_target == 0 || filled >= wait_target) ->
       /* Let through by the frame's own write (or a later one), not by ABANDON: its fill is
        * done. (The wait passes at one moment; a late write may lower the word again after.) */
       if
       :: filled != ABANDON && kernel_trusts == 1 ->
          complete_when_told = (fill_done >= kernel_seq); assert(complete_when_told)
       :: else -> skip
       fi;
       wait_target = 0; kernel_queued = 0; kernel_trusts = 0
     }
  :: reader_done == 1 && kernel_queued == 0 -> break
  od
}

/* The reader pool's watchdog (and its reading thread): a dead producer's word is raised, again
 * whenever a late write of an older frame lowered it, for as long as the wait is queued. */
active proctype watchdog() {
  do
#ifndef BROKEN_NO_WATCHDOG
  :: wait_target != 0 && watched == 1 && filled < wait_target && pdead == 1 ->
     atomic {
       if :: filled < wait_target -> filled = ABANDON :: else -> skip fi;
#ifdef BROKEN_ONCE
       watched = 0   /* forgets the wait once it raised the word */
#else
       skip
#endif
     }
#endif
  :: reader_done == 1 && kernel_queued == 0 -> break
  :: timeout ->
     no_stream_waits_forever = (kernel_queued == 0);
     assert(no_stream_waits_forever);
     break
  od
}
