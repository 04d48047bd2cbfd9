/* name.pml -- the channel's name (docs/protocol.md §3 and §6): the producer's name lock, the
 * socket that hands memory out, and a reader that follows a new producer. Each producer may die
 * at any step; the kernel drops its name lock in the same step as its death (the lock belongs to
 * the open file description, closed when the process ends), and a socket whose listener died
 * refuses connections.
 *
 * Checked (asserts):
 *   one_name_holder          at most one live producer has taken the name at any time
 *   reader_reads_name_holder a reader attaches only to memory of the producer holding the name
 *   gone_once                a reader reports producer_gone once per producer it read from
 * Options: -DREMOVAL (a process of the directory's trust removes the names under a live
 * producer: the documented window, refuted as one_name_holder), -DBROKEN_NO_LOCK (producers rely
 * on the socket alone: refuted as one_name_holder).
 */
#define NP 3            /* producers, started one after the other or together */

bit alive[NP + 1];      /* index 0: nobody */
bit taken[NP + 1];      /* past its lock: it is the channel's producer */
byte lock_holder = 0;   /* who holds the lock on the file the name refers to (0: nobody) */
byte lock_file = 1;     /* generation of the file at the lock's name (a removal makes a new one) */
byte holder_file = 0;   /* the generation the holder locked */
byte served = 0;        /* whose socket the name refers to (0: none) */
byte reports[NP + 1];   /* producer_gone reports the reader made for each producer */
hidden byte one_name_holder;
hidden byte reader_reads_name_holder;
hidden byte gone_once;

inline die(me) {
  atomic {
    alive[me] = 0;
    taken[me] = 0;
    if
    :: lock_holder == me -> lock_holder = 0
    :: else -> skip
    fi
  }
}

inline check_one_holder() {
  one_name_holder = (taken[1] + taken[2] + taken[3]) <= 1;
  assert(one_name_holder)
}

proctype producer(byte me) {
  alive[me] = 1;
#ifdef BROKEN_NO_LOCK
  atomic { taken[me] = 1; check_one_holder() }
#else
  /* F_OFD_SETLK: refused while another holds the lock on the file the name refers to. */
  atomic {
    if
    :: lock_holder == 0 || holder_file != lock_file ->
       lock_holder = me; holder_file = lock_file; taken[me] = 1; check_one_holder()
    :: else -> alive[me] = 0; goto done
    fi
  }
#endif
  /* memory made, header published, then the socket bound (replacing a stale one) */
  if
  :: die(me); goto done
  :: skip
  fi;
  served = me;
  if
  :: die(me); goto done
  :: skip
  fi;
  /* runs; a clean exit removes its names (if still its own) and drops the lock */
  atomic {
    if
    :: served == me -> served = 0
    :: else -> skip
    fi;
    alive[me] = 0;
    taken[me] = 0;
    if
    :: lock_holder == me -> lock_holder = 0
    :: else -> skip
    fi
  }
done:
  skip
}

#ifdef REMOVAL
/* RemoveIPC or a cleanup script: both names go; the live holder's lock is on the old file. */
proctype remover() {
  atomic { served = 0; lock_file++; }
}
#endif

proctype reader() {
  byte mine = 0;
  bit reported = 0;
  byte looks = 0;
  do
  :: looks < 8 ->
     looks++;
     atomic {
       if
       :: mine != 0 && !alive[mine] && !reported ->
          /* the probe: the lease of its memory's producer is dead or closed */
          reported = 1; reports[mine]++;
          gone_once = reports[mine] == 1;
          assert(gone_once)
       :: (mine == 0 || !alive[mine]) && served != 0 && alive[served] && served != mine ->
          /* connect: only a live listener answers; its credentials are a kernel fact */
          reader_reads_name_holder = lock_holder == served;
          assert(reader_reads_name_holder)
          if
          :: mine != 0 && !reported -> reports[mine]++
          :: else -> skip
          fi;
          if
          :: mine != 0 -> gone_once = reports[mine] == 1; assert(gone_once)
          :: else -> skip
          fi;
          mine = served; reported = 0
       :: else -> skip
       fi
     }
  :: looks >= 8 -> break
  od
}

init {
  atomic {
    run producer(1);
    run producer(2);
    run producer(3);
#ifdef REMOVAL
    run remover();
#endif
    run reader()
  }
}
