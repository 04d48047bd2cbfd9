/*
 * ipcring.pml -- Promela model of the ipcring slot protocol and lease protocol.
 *
 * Roles (one Promela process each, sharing the words of the control segment):
 *   Producer(P1ID)  the channel's creator: loans a slot, writes it, publishes it or drops the
 *                   loan, reaps dead readers when no slot is free; may die at any step.
 *   Producer(P2ID)  a second producer that tries once to take the channel over (new epoch),
 *                   after the first one died (or at the end, when it gets "producer exists").
 *   Reader(r)       attaches (takes a reader-table entry), claims frames under the latest or the
 *                   sequential policy, holds at most H, releases, detaches; may die (SIGKILL)
 *                   before any step and attach again as a new process (LIVES).
 *   Tool            `ringdump reap`: one probe/reap pass from another process; may die.
 *   Inspector       inspect() / `ringdump`: trylock on every ACTIVE lease and the producer's; an
 *                   owner-dead mutex is made consistent and unlocked without cleanup; may die.
 *                   (Tool and Inspector start after a death, or at the end: before that their
 *                   probes only meet live owners. docs/model.md lists such restrictions.)
 *   Observer        (OBSERVER=1) ReaderOptions::observer: takes no entry and sets no bit; copies
 *                   the newest frame's payload (two halves, each one load) and re-checks the slot
 *                   (O1)...(O3) of src/ring/observe.hpp; asserts that an accepted copy is one
 *                   publication's content (observed_copy_is_one_publication).
 *   Final           once every other process has ended: one more reap, then checks that no slot
 *                   has a reader bit and that the reader table is empty.
 *   Monitor         checks the invariants (at the end of this file) in every reachable state.
 * Names and tags follow src/ring/ring.hpp, src/producer.cpp, src/reader.cpp, docs/protocol.md:
 * (P1) producer claim, (P2) publication store, (P3) log store, (P4) head store, (R1) head load,
 * (R2) log load, (R3) reader claim, (R4) descriptor re-check, (R5) release, (R6) reaper's bit
 * clearing, (L1) entry taken, (L2) takeover's lease word, (L3) entry freed by a reaper.
 *
 * Atomicity. Every atomic{} is one instruction of the C++ (a load, a store, a CAS, a trylock),
 * with these fusions, each exact (docs/model.md gives the argument):
 *   - a load immediately followed by a CAS loop on the same word is one step (a CAS that would
 *     fail re-reads the word, so it is the same as loading later);
 *   - the reader's descriptor re-check (R4) is fused with its successful claim (R3): while its
 *     bit is set nobody writes the descriptor, which invariant (g) below checks;
 *   - the reader's head load (R1) and log load (R2) are one step (a later log load can only
 *     miss, and a miss changes nothing in shared memory);
 *   - trylock and pthread_mutex_consistent are one step, as in trylock_here.
 * Spin explores sequentially consistent executions only; the weak-memory argument (which release
 * pairs with which acquire) is in docs/protocol.md.
 *
 * Death. STEP(...) means "die here (if this process still has a death to spend) or do ...".
 * Every store, CAS and mutex operation is a STEP; pure loads are LOAD(...) without a death
 * point: dying just before a load is indistinguishable from dying just after it. Death is the
 * kernel's doing: each robust mutex the process holds becomes owner-dead; nothing else changes.
 *
 * Properties (assertions; Spin also reports invalid end states):
 *   (a) no write to a slot (descriptor or payload) while a live reader holds it: the producer
 *       asserts reading[k] == 0 at every write; the Monitor asserts that a held slot still
 *       carries the generation, descriptor and payload the reader saw, and is not W;
 *   (b) a held slot keeps the generation it was claimed in (ghost tgen: the unwrapped
 *       generation; the real one wraps modulo GENMOD, so the CAS meets ABA);
 *   (c) after every reader has ended (died or detached) and a reap has run: no slot has a
 *       reader bit and the reader table is empty (Final);
 *   (d) no invalid end state (deadlock): Spin's default check;
 *   (e) a live reader is never evicted: its entry keeps its generation, ACTIVE, its mutex;
 *   (f) no robust mutex becomes unrecoverable;
 *   (g) W implies an empty mask (the producer writes only slots no reader has marked);
 *   (h) each sequence number is published (head store) once, and a reader that holds
 *       sequence n holds the frame that was published as n (not an orphan of a dead producer);
 *   (i) sizing rule: with NS >= NR*H + 2 a loan never fails (asserted where it would fail).
 *
 * Switches (spin -DNAME[=value]): the sizes below; LOAN_POLICY; EPOCH_RECHECK; READERS_WAIT;
 * BROKEN_BLIND_OR, BROKEN_NO_RECHECK, BROKEN_DETACH_ORDER (deliberately wrong readers that must
 * fail); OBSERVER, with BROKEN_OBSERVER_NO_RECHECK (accepts every copy) and
 * BROKEN_OBSERVER_GEN_ONLY (re-checks the state word only, not the descriptor's sequence).
 */

/* ---- configuration ------------------------------------------------------------------------- */
#ifndef NS
#define NS 4          /* slots */
#endif
#ifndef NR
#define NR 2          /* reader-table entries (max_readers); entry e owns mask bit e */
#endif
#ifndef NRP
#define NRP 2         /* reader processes; more than NR exercises "table full" and reuse */
#endif
#ifndef H
#define H 1           /* max_held */
#endif
#ifndef LOG
#define LOG 4         /* publication log entries (the C++ has >= 4*slots; fewer is harsher) */
#endif
#ifndef MAXSEQ
#define MAXSEQ 5      /* sequences published in all: bounds the search */
#endif
#ifndef GENMOD
#define GENMOD 2      /* generation modulus: 2 = the state word repeats every two publications */
#endif
#ifndef SEQMASK
#define SEQMASK 2     /* bit r set: reader process r is sequential, else latest */
#endif
#ifndef LIVES
#define LIVES 1       /* attachments per reader process */
#endif
#ifndef RDIE
#define RDIE 0        /* deaths per reader process ... */
#endif
#ifndef RDIEMASK
#define RDIEMASK 255  /* ... for the reader processes whose bit is set here */
#endif
#ifndef PDIE
#define PDIE 0        /* deaths of the first producer */
#endif
#ifndef TAKEOVER
#define TAKEOVER 0    /* 1: run the takeover producer */
#endif
#ifndef TOOL
#define TOOL 0        /* 1: run `ringdump reap` once */
#endif
#ifndef TOOLDIE
#define TOOLDIE 0
#endif
#ifndef INSPECT
#define INSPECT 0     /* 1: run the inspector once over every lease */
#endif
#ifndef INSPDIE
#define INSPDIE 0
#endif
#ifndef DROPS
#define DROPS 1       /* loans each producer may drop without publishing */
#endif
#ifndef PERIODIC_REAP
#define PERIODIC_REAP 0  /* 1: any loan may start with a reap (the reap period elapsed) */
#endif
#ifndef LOAN_POLICY
#define LOAN_POLICY 5
#endif
/* LOAN_POLICY 5 (the default) is what the C++ does (src/ring/writer.cpp, claim_free_slot): scan
 *                (skipping the newest slot), reap, scan, then up to LOAN_LOOP scans that may take
 *                the newest slot; only where the sizing rule does not hold, a scan that saw
 *                exactly the busy words of the previous one ends the search (fail).
 * The others are broken variants, each refuted by a case of model/check.sh:
 * LOAN_POLICY 1: scan, reap, scan once more, fail (loan-as-briefed).
 * LOAN_POLICY 2: scan, reap, scan, then one scan that may take the newest slot, fail
 *                (loan-three-scans-three-readers, a --long case).
 * LOAN_POLICY 4: 5 with the early end everywhere: a lagging sequential reader repeats the same
 *                words where the sizing rule holds (loan-early-exit; docs/model.md, finding 1). */
#ifndef LOAN_LOOP
#define LOAN_LOOP (NR * (LOG + 1) + 1)   /* max_readers * (log_size + 1) + 1, as in the C++ */
#endif
#ifndef READERS_WAIT
#define READERS_WAIT 0   /* readers attach at once but read only once head >= READERS_WAIT */
#endif
#ifndef EPOCH_RECHECK
#define EPOCH_RECHECK 1  /* the reader re-reads the producer's epoch after its claim (reader.cpp) */
#endif

#define SIZING (NS >= NR * H + 2)
#ifndef OBSERVER
#define OBSERVER 0    /* 1: run an observer (no entry, copy and re-check) */
#endif
#define NPROC (1 + TAKEOVER + NRP + TOOL + INSPECT + OBSERVER)
#define NOSLOT 255

/* process identities (robust-mutex owners); 0 = nobody */
#define P1ID 1
#define P2ID 2
#define TOOLID 3
#define INSPID 4
#define FINALID 5
#define RBASE 6

/* trylock results (TakeResult in src/lease/lease.hpp) */
#define OK 0
#define EBUSY 1
#define EOWNERDEAD 2
#define ENOTREC 3

/* Die here (the kernel releases the robust mutexes) or perform the action as one instruction. */
#define STEP(...) if :: dl > 0 -> goto dead :: atomic { __VA_ARGS__ } fi
/* A pure load: no death point needed (see above). */
#define LOAD(...) atomic { __VA_ARGS__ }
/* CHECK(name, e): assert e under a readable name (pan reports "assert(name)"); the names are
 * hidden variables, not part of the state. */
#define CHECK(name, e) name = (e); assert(name)
/* Narration of counterexamples (spin -t replays them). pan does not print (no -DPRINTF), and
 * each printf sits inside an existing atomic step, so it adds no state. */
#define SAY(...) printf(__VA_ARGS__)

/* ---- shared memory ------------------------------------------------------------------------- */
/* Slot state word: generation (mod GENMOD) | W | mask. */
byte sgen[NS];
bit  sw[NS];
byte smask[NS];
/* Descriptor (written while W) and payload (its content: the sequence and epoch it carries). */
byte dseq[NS];
byte depoch[NS];
byte payseq[NS];
byte payep[NS];
#if OBSERVER
/* The payload's second half: the producer writes it in a step of its own, before the first half
 * (payseq, with the descriptor), so that a copy can see two publications' halves. */
byte payhi[NS];
bit  p1done;           /* ghost: the first producer has ended (the observer then stops) */
hidden byte observed_copy_is_one_publication;   /* an accepted copy is one frame's content */
#endif
/* Publication log and head. */
byte lseq[LOG];
byte lslot[LOG];
byte head;
/* Producer lease word: generation = epoch; ACTIVE. */
byte epoch;
/* Reader table: lease words (generation, ACTIVE). */
byte lwgen[NR];
bit  lwact[NR];
/* Robust mutexes: 0..NR-1 reader entries, NR the producer lease. */
byte mowner[NR + 1];
bit  mdead[NR + 1];    /* owner died: the next trylock gets EOWNERDEAD (until consistent) */
bit  munrec[NR + 1];   /* unlocked while inconsistent: ENOTRECOVERABLE */

/* ---- reader-private data (global so that the Monitor sees it) and ghosts --------------------- */
byte tgen[NS];         /* ghost: unwrapped generation of each slot */
byte reading[NS];      /* ghost: bit r: reader process r holds (reads) the frame in the slot */
byte hslot[NRP * H];   /* reader r's held frames: slot + 1 (0 = none) ... */
byte hcg[NRP * H];     /* ... the generation it claimed (the C++ Frame keeps it) ... */
byte htgen[NRP * H];   /* ... (ghost) the unwrapped generation at the claim ... */
byte hseq[NRP * H];    /* ... the sequence ... */
byte hep[NRP * H];     /* ... and the epoch of the frame */
byte rent[NRP];        /* reader process r is attached to entry rent[r] - 1 (0 = none) ... */
byte rgen[NRP];        /* ... under this entry generation */
byte pubep[MAXSEQ + 1];/* ghost: epoch of the frame published (head) as sequence n, 0 = none */
bit  p1dead;           /* ghosts: the first producer died ... */
bit  tookover;         /* ... and the second one took over */
byte ndone;            /* processes that have ended */
bit  rdied;            /* a reader has died */
byte nmain;            /* first producer and readers that have ended */
hidden byte pk;        /* loop index of print_slots (not part of the state) */
/* names of the checks (see CHECK) */
hidden byte owner_unlocks;                 /* only the owner unlocks a mutex */
hidden byte mutex_never_unrecoverable;     /* (f) */
hidden byte no_reader_on_written_slot;     /* (a) the producer writes no slot a reader marked */
hidden byte slot_untouched_while_loaned;   /* (g) nobody changed a W slot but its writer */
hidden byte loan_may_fail_here;            /* (i) false where the sizing rule holds */
hidden byte sequence_published_once;       /* (h) */
hidden byte held_frame_is_the_published_one;   /* (a),(h) payload and descriptor at the claim */
hidden byte claimed_frame_is_of_the_current_epoch;  /* no old-epoch frame after a takeover */
hidden byte w_slot_has_no_reader_bit;      /* (g) Monitor */
hidden byte held_frame_unchanged;          /* (a),(b) Monitor */
hidden byte live_reader_keeps_lease;       /* (e) Monitor */
hidden byte no_reader_bits_after_reap;     /* (c) Final */
hidden byte reader_table_empty_after_reap; /* (c) Final */
hidden byte w_left_only_by_dead_producer;  /* (c) Final */

/* Prints every slot as [gen W mask seq]. */
inline print_slots() {
  pk = 0;
  do
  :: pk < NS -> printf(" [g%d %c m%d s%d]", sgen[pk], (sw[pk] -> 'W' : '-'), smask[pk], dseq[pk]); pk++
  :: else -> break
  od;
  printf("\n");
  pk = 0
}

/* ---- robust mutexes ------------------------------------------------------------------------ */
/* trylock; on EOWNERDEAD the caller owns it and (as trylock_here does) makes it consistent. */
inline trylock(m, who, rc) {
  if
  :: mowner[m] != 0 -> rc = EBUSY
  :: mowner[m] == 0 && munrec[m] -> rc = ENOTREC
  :: mowner[m] == 0 && !munrec[m] ->
     mowner[m] = who;
     rc = (mdead[m] -> EOWNERDEAD : OK);
     mdead[m] = 0
  fi
}
inline unlock(m, who) {
  CHECK(owner_unlocks, mowner[m] == who);
  if
  :: mdead[m] -> munrec[m] = 1; mdead[m] = 0
  :: else
  fi;
  mowner[m] = 0
}
/* The kernel at process death: every robust mutex the process holds becomes owner-dead. */
inline kernel_exit(who) {
  SAY("process %d dies (SIGKILL): its robust mutexes become owner-dead\n", who);
  i = 0;
  do
  :: i <= NR ->
     if
     :: mowner[i] == who -> mowner[i] = 0; mdead[i] = 1
     :: else
     fi;
     i++
  :: else -> break
  od;
  i = 0
}

/* (R6) clear_reader_bits: clears entry ent's bit in every slot (load + CAS loop per slot). */
inline clear_bits(ent) {
  i = 0;
  do
  :: i < NS ->
     STEP(if
          :: (smask[i] & (1 << ent)) != 0 ->
             SAY("  clears bit %d in slot %d\n", ent, i); smask[i] = smask[i] & ~(1 << ent)
          :: else
          fi;
          i++)
  :: else -> break
  od;
  i = 0
}

/* Without deaths, and with no second process that could want an entry a reaper holds for a
 * moment, a reap cannot change anything another process sees: every ACTIVE entry's mutex is held
 * by its live owner (EBUSY), and an owner that detaches meanwhile never attaches again. Such
 * configurations skip it (exact; it only shortens the search). */
#define REAP_OBSERVABLE (RDIE > 0 || PDIE > 0 || TOOL || INSPECT || NRP > NR || LIVES > 1)

/* reap_dead_readers: probe each ACTIVE entry; a dead owner's bits are cleared, the entry freed. */
inline reap(who) {
#if REAP_OBSERVABLE
  e2 = 0;
  do
  :: e2 < NR ->
     LOAD(x = lwact[e2]);
     if
     :: x ->
        STEP(trylock(e2, who, rc);
             SAY("process %d probes entry %d: %d (0 taken, 1 EBUSY, 2 EOWNERDEAD)\n", who, e2, rc));
        if
        :: rc == EBUSY -> skip                    /* alive, or a prober holds it */
        :: rc == ENOTREC -> CHECK(mutex_never_unrecoverable, false)   /* (f) */
        :: rc == EOWNERDEAD || rc == OK ->
           LOAD(x = lwact[e2]);                   /* re-read under the lock */
           if
           :: x ->                                /* died, or vanished without detaching */
              clear_bits(e2);
              STEP(lwgen[e2]++; lwact[e2] = 0;    /* (L3) */
                   SAY("process %d reaped entry %d\n", who, e2))
           :: else                                /* detached meanwhile */
           fi;
           STEP(unlock(e2, who))
        fi
     :: else
     fi;
     atomic { e2++; x = 0; rc = 0 }
  :: else -> break
  od;
  e2 = 0
#else
  skip
#endif
}

/* A loan can succeed again: some slot is free, or some entry is ACTIVE with its mutex free
 * (a dead owner to reap). */
#define FREE_AT(k) (!sw[k] && smask[k] == 0)
#define DEAD_AT(e) (lwact[e] && mowner[e] == 0)
#if NS == 2
#define SOME_FREE (FREE_AT(0) || FREE_AT(1))
#elif NS == 3
#define SOME_FREE (FREE_AT(0) || FREE_AT(1) || FREE_AT(2))
#elif NS == 4
#define SOME_FREE (FREE_AT(0) || FREE_AT(1) || FREE_AT(2) || FREE_AT(3))
#elif NS == 5
#define SOME_FREE (FREE_AT(0) || FREE_AT(1) || FREE_AT(2) || FREE_AT(3) || FREE_AT(4))
#else
#define SOME_FREE (FREE_AT(0) || FREE_AT(1) || FREE_AT(2) || FREE_AT(3) || FREE_AT(4) || FREE_AT(5))
#endif
#if NR == 1
#define SOME_DEAD (DEAD_AT(0))
#elif NR == 2
#define SOME_DEAD (DEAD_AT(0) || DEAD_AT(1))
#else
#define SOME_DEAD (DEAD_AT(0) || DEAD_AT(1) || DEAD_AT(2))
#endif
#define RETRY_LATER atomic { SOME_FREE || SOME_DEAD }

/* LOAN_POLICY 4, 5: comparing, keeping and clearing the words a scan observed. Policy 5 records
 * nothing where the sizing rule holds (it would never use it). */
#if LOAN_POLICY == 4 || (LOAN_POLICY == 5 && !(NS >= NR * H + 2))
#define RECORD_OBS 1
#else
#define RECORD_OBS 0
#endif
#if NS == 2
#define OBS_SAME (obs[0] == prev[0] && obs[1] == prev[1])
#define OBS_KEEP prev[0] = obs[0]; prev[1] = obs[1]
#define OBS_CLEAR obs[0] = 0; obs[1] = 0; prev[0] = 0; prev[1] = 0
#elif NS == 3
#define OBS_SAME (obs[0] == prev[0] && obs[1] == prev[1] && obs[2] == prev[2])
#define OBS_KEEP prev[0] = obs[0]; prev[1] = obs[1]; prev[2] = obs[2]
#define OBS_CLEAR obs[0] = 0; obs[1] = 0; obs[2] = 0; prev[0] = 0; prev[1] = 0; prev[2] = 0
#elif NS == 4
#define OBS_SAME (obs[0] == prev[0] && obs[1] == prev[1] && obs[2] == prev[2] && obs[3] == prev[3])
#define OBS_KEEP prev[0] = obs[0]; prev[1] = obs[1]; prev[2] = obs[2]; prev[3] = obs[3]
#define OBS_CLEAR obs[0] = 0; obs[1] = 0; obs[2] = 0; obs[3] = 0; \
                  prev[0] = 0; prev[1] = 0; prev[2] = 0; prev[3] = 0
#elif NS == 5
#define OBS_SAME (obs[0] == prev[0] && obs[1] == prev[1] && obs[2] == prev[2] && \
                  obs[3] == prev[3] && obs[4] == prev[4])
#define OBS_KEEP prev[0] = obs[0]; prev[1] = obs[1]; prev[2] = obs[2]; prev[3] = obs[3]; \
                 prev[4] = obs[4]
#define OBS_CLEAR obs[0] = 0; obs[1] = 0; obs[2] = 0; obs[3] = 0; obs[4] = 0; \
                  prev[0] = 0; prev[1] = 0; prev[2] = 0; prev[3] = 0; prev[4] = 0
#else
#define OBS_SAME (obs[0] == prev[0] && obs[1] == prev[1] && obs[2] == prev[2] && \
                  obs[3] == prev[3] && obs[4] == prev[4] && obs[5] == prev[5])
#define OBS_KEEP prev[0] = obs[0]; prev[1] = obs[1]; prev[2] = obs[2]; prev[3] = obs[3]; \
                 prev[4] = obs[4]; prev[5] = obs[5]
#define OBS_CLEAR obs[0] = 0; obs[1] = 0; obs[2] = 0; obs[3] = 0; obs[4] = 0; obs[5] = 0; \
                  prev[0] = 0; prev[1] = 0; prev[2] = 0; prev[3] = 0; prev[4] = 0; prev[5] = 0
#endif

/* ---- producer ------------------------------------------------------------------------------ */
proctype Producer(byte me) {
  byte dl, k, n, sg, last, hs, i, e2, rc, x, pass, cand, drops;
#if RECORD_OBS
  byte obs[NS], prev[NS];   /* the words of the busy slots the current / previous scan saw */
#endif
  drops = DROPS;
  hs = NOSLOT;      /* newest_slot: skipped by the first scans */
  last = 0;         /* cursor: scans start after it */
  if
  :: me == P1ID ->
     dl = PDIE      /* the creator: holds the producer lease, epoch 1 (see init) */
  :: else ->
     /* Takeover: trylock the producer lease. It is tried once the first producer has died:
      * trying earlier only gets EBUSY ("producer exists") and changes nothing. */
     p1dead || nmain == 1 + NRP;
     STEP(trylock(NR, me, rc);
          tookover = (rc == EOWNERDEAD || rc == OK);
          SAY("P%d: trylock of the producer lease: %d (0 taken, 1 EBUSY, 2 EOWNERDEAD)\n", me, rc));
     if
     :: rc == EBUSY -> goto done                 /* "producer exists" */
     :: rc == ENOTREC -> CHECK(mutex_never_unrecoverable, false)   /* (f) */
     :: else                                     /* EOWNERDEAD, or 0: owner gone: take over */
     fi;
     /* recover_after_producer_death: slots left W by the dead producer become free. */
     k = 0;
     do
     :: k < NS ->
        LOAD(x = sw[k]; sg = sgen[k]);
        if
        :: x ->                                  /* (a),(g): nobody may have touched it */
           STEP(CHECK(slot_untouched_while_loaned, sw[k] && sgen[k] == sg && smask[k] == 0);
                CHECK(no_reader_on_written_slot, reading[k] == 0);
                dseq[k] = 0; sgen[k] = (sg + 1) % GENMOD; tgen[k]++; sw[k] = 0;
                SAY("P%d: resets slot %d left W by the dead producer\n", me, k))
        :: else
        fi;
        atomic { k++; x = 0; sg = 0 }
     :: else -> break
     od;
     k = 0;
     LOAD(n = head);                             /* next_sequence = head + 1 */
     /* The dead producer may have logged head + 1 (P3) without storing head (P4): that log
      * entry is rewritten (P3) before head reaches it (P4), so no reader can see it; (h) and
      * the check at every hold verify this. */
     STEP(epoch++;                               /* (L2) new epoch, ACTIVE */
          SAY("P%d: epoch %d, next sequence %d\n", me, epoch, n + 1));
     reap(me)
  fi;

  do
  :: n >= MAXSEQ -> break
  :: else ->
#if PERIODIC_REAP
     if
     :: reap(me)
     :: skip
     fi;
#endif
     /* loan(): find_free scans, each from the slot after the cursor */
     atomic { pass = 0; cand = NOSLOT; i = 1 };
     do
     :: cand == NOSLOT && i <= NS ->
        /* (P1) claim_for_write: (g, !W, 0) -> (g, W, 0); the first two scans skip the slot of
         * the newest frame, to keep it readable */
        STEP(k = (last + i) % NS;
             i++;
             if
             :: k == hs && pass < 2 -> skip
             :: else ->
                if
                :: !sw[k] && smask[k] == 0 ->
                   sw[k] = 1; sg = sgen[k]; cand = k;
                   SAY("P%d: loan of slot %d:", me, k); print_slots()
                :: else -> SAY("P%d: scan %d: slot %d busy:", me, pass, k); print_slots()
                fi
             fi)
#if RECORD_OBS
        ;
        if
        :: cand == NOSLOT && pass >= 2 ->
           LOAD(obs[k] = sgen[k] + 2 * sw[k] + 4 * smask[k])   /* find_free's `observed` */
        :: else
        fi
#endif
     :: cand == NOSLOT && i > NS ->              /* a whole scan found nothing */
        atomic { pass++; i = 1 };
        if
        :: pass == 1 -> reap(me)                 /* reap, then scan again */
#if LOAN_POLICY == 1
        :: pass == 2 -> break                    /* no_free_slot */
#elif LOAN_POLICY == 2
        :: pass == 2 -> skip                     /* the last scan may take the newest slot */
        :: pass == 3 -> break
#else    /* 4, 5 */
        :: pass == 2 -> skip                     /* the loop of scans that may take the newest */
        :: pass >= 3 && pass < 2 + LOAN_LOOP ->
#if RECORD_OBS
           if
           :: pass >= 4 && OBS_SAME ->           /* saw the previous scan's words: give up */
              atomic { SAY("P%d: scan %d saw what scan %d saw: gives up\n", me, pass - 1, pass - 2);
                       OBS_CLEAR };
              break
           :: else -> atomic { OBS_KEEP }
           fi
#else
           skip
#endif
        :: pass == 2 + LOAN_LOOP -> break
#endif
        fi
     :: cand != NOSLOT -> break
     od;
     if
     :: cand == NOSLOT ->
        atomic { SAY("P%d: loan fails: no_free_slot:", me); print_slots();
                 CHECK(loan_may_fail_here, !SIZING) };   /* (i) */
        /* The caller tries again later: once a slot is free or a reader is dead (a retry
         * before that changes nothing in shared memory). */
        RETRY_LATER
     :: else ->
        /* The loan. W is set: (a) nobody may be reading the slot while we write it. */
        STEP(k = cand; last = k; cand = NOSLOT; hs = (hs == k -> NOSLOT : hs);
             CHECK(no_reader_on_written_slot, reading[k] == 0 && smask[k] == 0);
             dseq[k] = 0; payseq[k] = 0; payep[k] = 0
#if OBSERVER
             ; payhi[k] = 0
#endif
             );
        if
        :: drops > 0 ->
           /* unclaim: (g, W, 0) -> (g, !W, 0) */
           STEP(CHECK(slot_untouched_while_loaned, sw[k] && smask[k] == 0 && sgen[k] == sg);
                CHECK(no_reader_on_written_slot, reading[k] == 0); sw[k] = 0;
                drops--; sg = 0; SAY("P%d: drops the loan of slot %d\n", me, k))
        :: true ->
#if OBSERVER
           /* the payload's second half (the first goes with the descriptor, next step) */
           STEP(CHECK(no_reader_on_written_slot, reading[k] == 0 && smask[k] == 0);
                payhi[k] = n + 1);
#endif
           /* payload done; descriptor (relaxed stores) */
           STEP(n++; CHECK(no_reader_on_written_slot, reading[k] == 0 && smask[k] == 0);
                payseq[k] = n; payep[k] = epoch; dseq[k] = n; depoch[k] = epoch);
           /* (P2) release store: (g, W, 0) -> (g + 1, !W, 0) */
           STEP(CHECK(slot_untouched_while_loaned, sw[k] && smask[k] == 0 && sgen[k] == sg);
                sgen[k] = (sg + 1) % GENMOD; tgen[k]++; sw[k] = 0; sg = 0;
                SAY("P%d: publishes seq %d in slot %d:", me, n, k); print_slots());
           /* (P3) log entry */
           STEP(lseq[n % LOG] = n; lslot[n % LOG] = k; SAY("P%d: log[%d] = slot %d\n", me, n, k));
           /* (P4) head; (h) each sequence is published once */
           STEP(head = n; CHECK(sequence_published_once, pubep[n] == 0); pubep[n] = epoch; hs = k;
                SAY("P%d: head = %d\n", me, n))
        fi
     fi;
     atomic { pass = 0; i = 0; k = 0
#if RECORD_OBS
              ; OBS_CLEAR
#endif
     }
  od;
  goto done;
dead:
  atomic { kernel_exit(me); p1dead = 1 };
done:
  atomic { ndone++; nmain = nmain + (me == P1ID -> 1 : 0)
#if OBSERVER
           ; p1done = p1done || me == P1ID
#endif
  }
}

/* ---- reader -------------------------------------------------------------------------------- */
#define ME (RBASE + r)
#define HX(j) (r * H + (j))

/* (R4) the claim landed on sequence n of our epoch? */
#ifdef BROKEN_NO_RECHECK
#define RECHECK (depoch[k] == ce)                 /* BROKEN: the sequence is not re-checked */
#else
#define RECHECK (dseq[k] == n && depoch[k] == ce)
#endif
/* Hold the frame (ghost: from here on the reader reads the payload, which must be the frame it
 * was promised, of the epoch the channel is in). */
#define HOLD \
  i = 0; \
  do \
  :: hslot[HX(i)] != 0 -> i++ \
  :: else -> break \
  od; \
  hslot[HX(i)] = k + 1; hcg[HX(i)] = cg; htgen[HX(i)] = tgen[k]; \
  hseq[HX(i)] = n; hep[HX(i)] = ce; \
  reading[k] = reading[k] | (1 << r); \
  SAY("R%d: holds seq %d in slot %d:", r, n, k); print_slots(); \
  held++; got = 1; i = 0; \
  CHECK(held_frame_is_the_published_one, payseq[k] == n && payep[k] == ce && pubep[n] == ce); \
  CHECK(claimed_frame_is_of_the_current_epoch, ce == epoch)

/* After a successful claim: the re-check (R4). With EPOCH_RECHECK (reader.cpp now) a frame that
 * passes it is held only after one more load of the producer's lease word shows that the epoch
 * the reader cached at the start of try_read is still the channel's epoch; EPOCH_RECHECK=0 is the
 * earlier reader, which held it at once (refuted: claimed_frame_is_of_the_current_epoch). */
#define NOT_IT SAY("R%d: claimed slot %d for seq %d, but it holds seq %d:", r, k, n, dseq[k]); \
               print_slots()
#if EPOCH_RECHECK
#define RECHECK_AND_HOLD \
  if \
  :: RECHECK -> ok = 1 \
  :: else -> NOT_IT \
  fi
#define EPOCH_RECHECK_STEP \
  if \
  :: ok -> \
     LOAD(if \
          :: epoch == ce -> HOLD \
          :: else -> SAY("R%d: the epoch changed: gives seq %d back\n", r, n) \
          fi; \
          ok = 0) \
  :: else \
  fi
#else
#define RECHECK_AND_HOLD \
  if \
  :: RECHECK -> HOLD \
  :: else -> NOT_IT \
  fi
#define EPOCH_RECHECK_STEP skip
#endif

/* (R1) head, the target under the reader's policy (sequential: the next sequence, but no
 * further back than the log reaches; latest: head), and (R2) its log entry. The two loads are
 * one step: a log entry is only ever rewritten with a larger sequence, so loading it later can
 * only turn a hit into a miss, and a miss changes nothing in shared memory (docs/model.md). */
#define TARGET \
  h = head; \
  n = (seqp -> last + 1 : h); \
  n = ((seqp && h - n >= LOG) -> h - LOG + 1 : n); \
  h = 0; \
  j = lseq[n % LOG]; k = lslot[n % LOG]

/* One read attempt of target n: (R3) claim, (R4) re-check, and (R5) giving the bit back when
 * the claim landed on another frame. A lost frame stays lost (its log entry was rewritten, its
 * slot reloaned or republished), so the reader moves past n either way; the C++ latest reader
 * re-reads head and may retry n, which only repeats a claim that cannot succeed. */
#ifdef BROKEN_BLIND_OR
/* BROKEN: decides on one load, then sets the bit with a blind OR instead of a CAS. */
#define CLAIM \
  LOAD(rc = ((j != n || sw[k] || (smask[k] & bitv) != 0) -> EBUSY : OK); cg = sgen[k]); \
  STEP(if \
       :: rc == OK -> smask[k] = smask[k] | bitv; RECHECK_AND_HOLD \
       :: else \
       fi; \
       last = n)
#else
/* claim_for_read: CAS (g, !W, m) -> (g, !W, m | bit) of the word it loaded. */
#define CLAIM \
  STEP(rc = ((j != n || sw[k] || (smask[k] & bitv) != 0) -> EBUSY : OK); \
       if \
       :: rc == OK -> smask[k] = smask[k] | bitv; cg = sgen[k]; RECHECK_AND_HOLD \
       :: else \
       fi; \
       last = n)
#endif
#define READ_FRAME \
  CLAIM; \
  EPOCH_RECHECK_STEP; \
  if \
  :: rc == OK && !got -> \
     STEP(if \
          :: sgen[k] == cg && (smask[k] & bitv) != 0 -> smask[k] = smask[k] & ~bitv \
          :: else \
          fi; \
          SAY("R%d: gives back slot %d\n", r, k); \
          n = 0; k = 0; j = 0; cg = 0; rc = 0; got = 0) \
  :: else -> atomic { n = 0; k = 0; j = 0; cg = 0; rc = 0; got = 0 } \
  fi

proctype Reader(byte r) {
  byte dl, lives, e, n, k, j, h, last, cg, ce, rc, i, x, e2, held, bitv, pass;
  bit seqp, got, ok;
  dl = ((RDIEMASK >> r) & 1) * RDIE;
  seqp = (SEQMASK >> r) & 1;
life:
  if
  :: lives < LIVES -> lives++
  :: else -> goto done
  fi;
  /* ---- attach: the first entry whose lease mutex we can take; a second pass after a reap */
  atomic { pass = 0; e = 0 };
  do
  :: e == NR && pass == 0 -> reap(ME); atomic { pass = 1; e = 0 }
  :: e == NR && pass == 1 -> atomic { pass = 0; e = 0 }; goto life   /* too_many_readers */
  :: e < NR ->
     STEP(trylock(e, ME, rc));
     if
     :: rc == EBUSY -> e++
     :: rc == ENOTREC -> CHECK(mutex_never_unrecoverable, false)   /* (f) */
     :: else -> break                            /* taken, or owner_died (made consistent) */
     fi
  od;
  atomic { pass = 0; rc = 0 };
  /* take_reader_entry: a previous owner that left it ACTIVE died or vanished: clear its bits */
  LOAD(x = lwact[e]);
  if
  :: x -> clear_bits(e)
  :: else
  fi;
  STEP(lwgen[e]++; lwact[e] = 1; rgen[r] = lwgen[e]; rent[r] = e + 1; bitv = 1 << e; x = 0; /* (L1) */
       SAY("R%d: attached as entry %d (%c)\n", r, e, (seqp -> 'S' : 'L')));
#if TAKEOVER
  LOAD(ce = epoch);
  LOAD(h = head; last = (h > 0 -> h - 1 : 0); h = 0);   /* start with the newest frame */
#else
  LOAD(ce = epoch; h = head; last = (h > 0 -> h - 1 : 0); h = 0);  /* (epoch is constant) */
#endif

#if READERS_WAIT > 0
  head >= READERS_WAIT;                          /* a slow reader: the producer runs ahead */
#endif
  /* ---- run: read, release, detach. No separate death option is needed while waiting: the
   * first action of every option below is a STEP (or loads leading to one). */
  do
#if TAKEOVER
  :: atomic { held < H && head > last -> x = epoch }   /* a frame may be there; lease word */
     if
     :: x != ce -> atomic { ce = x; x = 0 }              /* producer_gone, once per epoch */
     :: else -> LOAD(x = 0; TARGET); READ_FRAME
     fi
#else
  :: atomic { held < H && head > last -> TARGET }       /* a frame may be there */
     READ_FRAME
#endif
  :: held > 0 ->
     /* Frame::release of a held frame: (R5) */
     STEP(i = 0;
          do
          :: hslot[HX(i)] == 0 -> i++
          :: else -> break
          od;
          k = hslot[HX(i)] - 1;
          reading[k] = reading[k] & ~(1 << r);
          if
          :: sgen[k] == hcg[HX(i)] && (smask[k] & bitv) != 0 -> smask[k] = smask[k] & ~bitv
          :: else                                /* a reaper released it for us */
          fi;
          hslot[HX(i)] = 0; hcg[HX(i)] = 0; htgen[HX(i)] = 0; hseq[HX(i)] = 0; hep[HX(i)] = 0;
          SAY("R%d: releases slot %d:", r, k); print_slots();
          held--; i = 0; k = 0)
  :: held == 0 ->
     /* detach: clear our bits everywhere, free the entry, give back the lease */
     clear_bits(e);
#ifdef BROKEN_DETACH_ORDER
     /* BROKEN: gives back the lease before marking the entry free */
     STEP(unlock(e, ME); SAY("R%d: unlocks its entry\n", r));
     STEP(lwgen[e]++; lwact[e] = 0; rent[r] = 0; rgen[r] = 0; SAY("R%d: detaches\n", r);
          e = 0; bitv = 0; last = 0; ce = 0);
#else
     STEP(lwgen[e]++; lwact[e] = 0; rent[r] = 0; rgen[r] = 0; SAY("R%d: detaches\n", r));
     STEP(unlock(e, ME); e = 0; bitv = 0; last = 0; ce = 0);
#endif
     goto done                                   /* a new life only after a death */
  od;
dead:
  atomic {
    kernel_exit(ME);
    i = 0;
    do
    :: i < H ->
       if
       :: hslot[HX(i)] != 0 ->
          reading[hslot[HX(i)] - 1] = reading[hslot[HX(i)] - 1] & ~(1 << r);
          hslot[HX(i)] = 0; hcg[HX(i)] = 0; htgen[HX(i)] = 0; hseq[HX(i)] = 0; hep[HX(i)] = 0
       :: else
       fi;
       i++
    :: else -> break
    od;
    rent[r] = 0; rgen[r] = 0; rdied = 1;
    held = 0; dl--;
    i = 0; e = 0; n = 0; k = 0; j = 0; h = 0; last = 0; cg = 0; ce = 0; rc = 0; x = 0;
    e2 = 0; bitv = 0; pass = 0; got = 0
  };
  goto life;
done:
  atomic { ndone++; nmain++ }
}

/* ---- `ringdump reap` ----------------------------------------------------------------------- */
proctype Tool() {
  byte dl, i, e2, rc, x;
  dl = TOOLDIE;
  rdied || nmain == 1 + NRP;   /* after a reader died, or at the end (docs/model.md) */
  reap(TOOLID);
  goto done;
dead:
  atomic { kernel_exit(TOOLID) };
done:
  atomic { ndone++ }
}

/* ---- inspect() / `ringdump`: probe_alive on every lease, the producer's included ------------ */
proctype Inspector() {
  byte dl, i, e2, rc;
  dl = INSPDIE;
  rdied || p1dead || nmain == 1 + NRP;  /* probes of live owners only get EBUSY */
  e2 = 0;
  do
  :: e2 <= NR ->
     LOAD(rc = ((e2 == NR || lwact[e2]) -> OK : EBUSY));   /* only ACTIVE leases are probed */
     if
     :: rc == OK ->
        STEP(trylock(e2, INSPID, rc));
        if
        :: rc == EOWNERDEAD || rc == OK ->       /* made consistent; no cleanup: stays ACTIVE */
           STEP(unlock(e2, INSPID))
        :: rc == EBUSY -> skip
        :: rc == ENOTREC -> CHECK(mutex_never_unrecoverable, false)   /* (f) */
        fi
     :: else
     fi;
     atomic { e2++; rc = 0 }
  :: else -> break
  od;
  goto done;
dead:
  atomic { kernel_exit(INSPID) };
done:
  atomic { ndone++ }
}

/* ---- observer (src/ring/observe.hpp) -------------------------------------------------------- */
#if OBSERVER
/* The latest policy over copies: head, the log entry, (O1) the state word, the descriptor, (O2)
 * the copy (two loads: the halves), (O3) the re-check: the state word (generation, W), the
 * descriptor's sequence and epoch, the producer's epoch, each one load as in observe_confirm. It
 * writes nothing shared, so its death changes nothing and is not modelled. */
#if defined(BROKEN_OBSERVER_NO_RECHECK)
#define OBSERVER_ACCEPTS 1
#elif defined(BROKEN_OBSERVER_GEN_ONLY)
#define OBSERVER_ACCEPTS (!x && g2 == og)
#else
#define OBSERVER_ACCEPTS (!x && g2 == og && s2 == os && e2 == oe && ep == ce)
#endif
proctype Observer() {
  byte t, k, q, og, os, oe, ca, cb, x, g2, s2, e2, ep, ce, last;
  do
  :: LOAD(t = head; ce = epoch);               /* (R1) and the epoch the read starts with */
     if
     :: t <= last && p1done -> break
     :: t <= last && !p1done -> atomic { head > last || p1done }   /* waits (read(timeout)) */
     :: t > last ->
        LOAD(q = lseq[t % LOG]; k = lslot[t % LOG]);          /* (R2) */
        if
        :: q != t -> skip                                     /* overwritten in the log */
        :: else ->
           LOAD(x = sw[k]; og = sgen[k]);                     /* (O1) */
           LOAD(os = dseq[k]; oe = depoch[k]);                /* the descriptor */
           if
           :: x || os != t || oe != ce -> skip                /* gone, or being rewritten */
           :: else ->
              LOAD(ca = payseq[k]);                           /* (O2) the copy: first half */
              LOAD(cb = payhi[k]);                            /*      second half */
              LOAD(x = sw[k]; g2 = sgen[k]);                  /* (O3) the state word */
              LOAD(s2 = dseq[k]);                             /*      the descriptor's sequence */
              LOAD(e2 = depoch[k]);                           /*      and epoch */
              LOAD(ep = epoch);                               /*      the producer's epoch */
              if
              :: OBSERVER_ACCEPTS ->
                 atomic { SAY("O: accepts seq %d of slot %d: halves %d %d\n", os, k, ca, cb);
                          CHECK(observed_copy_is_one_publication,
                                ca == os && cb == os && pubep[os] == oe);
                          last = t }
              :: else -> SAY("O: drops its copy of seq %d (slot %d changed)\n", os, k)
              fi
           fi
        fi
     fi;
     atomic { q = 0; k = 0; og = 0; os = 0; oe = 0; ca = 0; cb = 0; x = 0; g2 = 0; s2 = 0; e2 = 0;
              ep = 0 }
  od;
  atomic { ndone++ }
}
#endif

/* ---- (c): when everyone else has ended, one reap leaves no bits and an empty table ---------- */
active proctype Final() {
  byte dl, i, e2, rc, x;
end_wait:
  ndone == NPROC;
  reap(FINALID);
  atomic {
    i = 0;
    do
    :: i < NS ->
       CHECK(no_reader_bits_after_reap, smask[i] == 0 && reading[i] == 0);
       /* a W slot is left only by a dead producer that nobody took over from */
       CHECK(w_left_only_by_dead_producer, !sw[i] || (p1dead && !tookover));
       i++
    :: else -> break
    od;
    i = 0;
    do
    :: i < NR -> CHECK(reader_table_empty_after_reap, !lwact[i] && mowner[i] == 0); i++
    :: else -> break
    od
  };
  goto done;
dead:
  skip;        /* dl is 0: never reached */
done:
  skip
}

/* ---- invariants, checked in every state ------------------------------------------------------ */
/* (g) W implies no reader bit */
#define SLOT_OK(k) (!sw[k] || smask[k] == 0)
/* (a)+(b): a held frame's slot is not W and keeps its generation, descriptor, payload, our bit */
#define HOLD_AT(x, k) (tgen[k] == htgen[x] && !sw[k] && dseq[k] == hseq[x] && \
                       depoch[k] == hep[x] && payseq[k] == hseq[x] && payep[k] == hep[x] && \
                       rent[(x) / H] != 0 && (smask[k] & (1 << (rent[(x) / H] - 1))) != 0)
#define HOLD_OK(x) (hslot[x] == 0 || HOLD_AT(x, hslot[x] - 1))
/* (e) a live attached reader keeps its entry: same generation, ACTIVE, its mutex */
#define READER_OK(r) (rent[r] == 0 || (lwgen[rent[r] - 1] == rgen[r] && lwact[rent[r] - 1] && \
                                       mowner[rent[r] - 1] == RBASE + (r)))
/* (f) */
#define MUTEX_OK(m) (!munrec[m])

#if NS == 2
#define SLOTS_OK (SLOT_OK(0) && SLOT_OK(1))
#elif NS == 3
#define SLOTS_OK (SLOT_OK(0) && SLOT_OK(1) && SLOT_OK(2))
#elif NS == 4
#define SLOTS_OK (SLOT_OK(0) && SLOT_OK(1) && SLOT_OK(2) && SLOT_OK(3))
#elif NS == 5
#define SLOTS_OK (SLOT_OK(0) && SLOT_OK(1) && SLOT_OK(2) && SLOT_OK(3) && SLOT_OK(4))
#elif NS == 6
#define SLOTS_OK (SLOT_OK(0) && SLOT_OK(1) && SLOT_OK(2) && SLOT_OK(3) && SLOT_OK(4) && SLOT_OK(5))
#else
#error "NS must be 2..6"
#endif

#if NRP * H == 1
#define HOLDS_OK (HOLD_OK(0))
#elif NRP * H == 2
#define HOLDS_OK (HOLD_OK(0) && HOLD_OK(1))
#elif NRP * H == 3
#define HOLDS_OK (HOLD_OK(0) && HOLD_OK(1) && HOLD_OK(2))
#elif NRP * H == 4
#define HOLDS_OK (HOLD_OK(0) && HOLD_OK(1) && HOLD_OK(2) && HOLD_OK(3))
#elif NRP * H == 6
#define HOLDS_OK (HOLD_OK(0) && HOLD_OK(1) && HOLD_OK(2) && HOLD_OK(3) && HOLD_OK(4) && HOLD_OK(5))
#else
#error "NRP * H must be 1..4 or 6"
#endif

#if NRP == 1
#define READERS_OK (READER_OK(0))
#elif NRP == 2
#define READERS_OK (READER_OK(0) && READER_OK(1))
#elif NRP == 3
#define READERS_OK (READER_OK(0) && READER_OK(1) && READER_OK(2))
#else
#error "NRP must be 1..3"
#endif

#if NR == 1
#define MUTEXES_OK (MUTEX_OK(0) && MUTEX_OK(1))
#elif NR == 2
#define MUTEXES_OK (MUTEX_OK(0) && MUTEX_OK(1) && MUTEX_OK(2))
#elif NR == 3
#define MUTEXES_OK (MUTEX_OK(0) && MUTEX_OK(1) && MUTEX_OK(2) && MUTEX_OK(3))
#else
#error "NR must be 1..3"
#endif

#define INVARIANT (SLOTS_OK && HOLDS_OK && READERS_OK && MUTEXES_OK)

active proctype Monitor() {
end_monitor:
  atomic {
    !INVARIANT ->
    CHECK(w_slot_has_no_reader_bit, SLOTS_OK);
    CHECK(held_frame_unchanged, HOLDS_OK);
    CHECK(live_reader_keeps_lease, READERS_OK);
    CHECK(mutex_never_unrecoverable, MUTEXES_OK)
  }
}

/* ---- creation: Producer::create ------------------------------------------------------------ */
init {
  byte i;
  atomic {
    mowner[NR] = P1ID;        /* the creator holds the producer lease ... */
    epoch = 1;                /* ... epoch 1, ACTIVE; every slot free, the log empty */
    run Producer(P1ID);
#if TAKEOVER
    run Producer(P2ID);
#endif
    i = 0;
    do
    :: i < NRP -> run Reader(i); i++
    :: else -> break
    od;
#if TOOL
    run Tool();
#endif
#if INSPECT
    run Inspector();
#endif
#if OBSERVER
    run Observer();
#endif
    i = 0
  }
}
