/*
 * fifo.pml - a Promela model of cistern's FIFO slot protocol (lib/fifo.c) and
 * of liveness and reclaim (lib/liveness.c), as docs/protocol/fifo.md and
 * docs/protocol/liveness.md state them: 2 producers, 1 reader (restarted when
 * killed, as a supervisor would), a ring of 2 slots, and a killer that
 * SIGKILLs any of them at any step, up to MAXKILLS times. Run it with
 * model/check.sh.
 *
 * Checked, in every interleaving:
 *  - no lost sample: when the reader sees end of data, every sample whose
 *    commit happened (T2) has been received;
 *  - no duplicate except a redelivery: a sample is received at most once plus
 *    the number of times it was handed out again after its reader died;
 *  - no damage: a reader finds in a slot the sample committed at its position;
 *  - no deadlock or wedge: every run ends with the reader at end of data and
 *    every process at its end (spin reports any other final state), and a
 *    waiter woken by its periodic timer twice with nothing changed in between
 *    fails an assertion.
 *
 * With -DSOLE the segment has CISTERN_SINGLE_PRODUCER | CISTERN_SINGLE_READER
 * (lib/sole.c): a producer or reader first takes its role (sweeping a dead
 * holder), and the holder makes T1 and T5 as the code does then: a load of the
 * slot word, a plain store of the new word, a plain store of the index, each
 * its own step, so a kill can land between any two. The reader may also go
 * the one-step get's way for a sample of a line or less: the load, the copy,
 * T11 (COMMITTED straight to FREE: the sample is received), then the index;
 * or a batch's: T11 on the next slot too, and the index moved once.
 *
 * Granularity: each access to a shared word is one step; a CAS is one atomic
 * step (a guard on the whole slot word, then the write); a process can die
 * between any two steps, never inside one. Death releases the locks the
 * process held, as the kernel drops its OFD locks. Waiting is modelled as
 * "block until a wake (a counter bumped where lib/ calls cistern__wake_*,
 * read before the last try, as the futex word is), or sweep when an
 * attachment is dead, or the periodic timer when nothing else can move", so
 * the model checks the ring and the reclaim, not the futex code itself.
 */

#define NSLOT 2
#define NENT 4          /* attachment entries: one more than processes alive at once */
#ifndef A_PUTS
#define A_PUTS 1        /* samples producer A puts (ids 1..A_PUTS); B puts one more */
#endif
#define NSAMPLE (A_PUTS + 1)
#define NPROC 10
#define NPOS 16         /* positions stay far below this */
#ifndef MAXKILLS
#define MAXKILLS 1
#endif

/* slot states */
#define FREE 0
#define RES 1
#define COM 2
#define ACQ 3
#define SKIP 4
#define RED 5

/* entry states */
#define E_FREE 0
#define E_ACTIVE 1
#define E_RECL 2

byte wpos[NSLOT], wst[NSLOT], wown[NSLOT];  /* the slot word: position, state, owner */
byte data[NSLOT];                           /* the payload: a sample id */
byte tail, head, hint;
bool closed;
byte sole_p, sole_r;    /* CISTERN_SINGLE_*: the holding entry + 1, or 0 */
byte estate[NENT];
byte lockh[NENT];       /* holder of the entry's lock: _pid + 1, or 0 */
byte lockr[NENT];       /* holder of the entry's intent lock (CISTERN_INTENT_BASE) */
bool killed[NPROC];
byte kills;
byte pdone;             /* producers finished or dead */
byte wakes;             /* cistern__wake_all calls (the end of every reclaim) */
#ifdef HANDBACK
byte handbacks;         /* cistern_unacquire calls so far */
#endif

/* ghosts, for the properties only */
bool published[NSAMPLE + 1];
byte received[NSAMPLE + 1];
byte redelivered[NSAMPLE + 1];
byte possample[NPOS];
bool eod;

#define DEAD(e) (estate[e] != E_FREE && lockh[e] == 0)
#define ANYDEAD (DEAD(0) || DEAD(1) || DEAD(2) || DEAD(3))
/* End of data waits while an entry is being reclaimed, or is dead and not reclaimed yet. */
#define UNDERWAY(e) (estate[e] == E_RECL || (estate[e] != E_FREE && lockr[e] != 0) || DEAD(e))
#define ANYRECL (UNDERWAY(0) || UNDERWAY(1) || UNDERWAY(2) || UNDERWAY(3))
/* A role holder (entry + 1) whose process is gone; the index never goes negative. */
#define DEADHOLDER(r) (r != 0 && DEAD((r + NENT - 1) % NENT))
/* A futex wake: the places lib/ calls cistern__wake_*; counted modulo 8. */
#define WAKE wakes = (wakes + 1) % 8

/* Move an index from v to v+1 unless someone already did (help_advance). */
inline help(idx, v) {
	atomic { if :: idx == v -> idx = v + 1 :: else -> skip fi }
}

/* Give back what entry e's owner held (reclaim_entry + fifo_reclaim); lock held. */
inline reclaim(e) {
	estate[e] = E_RECL;
	k = 0;
	do
	:: k < NSLOT ->
		if
		:: atomic { wown[k] == e + 1 && wst[k] == RES -> wst[k] = SKIP; wown[k] = 0 }  /* T4 */
		:: atomic { wown[k] == e + 1 && wst[k] == ACQ -> wst[k] = RED }; hint++         /* T8 */
		:: atomic { wown[k] == e + 1 && wst[k] == RED -> hint++ }                       /* redo */
#ifdef HANDBACK
		:: atomic { wown[k] == 0 && wst[k] == RED -> handed = true }     /* a hand-back's mark */
#endif
		:: else -> skip
		fi;
		k++
	:: else -> break
	od;
#ifdef HANDBACK
	/* A hand-back cut between its mark and its hint names no owner: raise it once. */
	if :: handed -> hint++; handed = false :: else -> skip fi;
#endif
	k = 0;
	/* cistern__drop_sole, after the slots */
	if :: sole_p == e + 1 -> sole_p = 0 :: else -> skip fi;
	if :: sole_r == e + 1 -> sole_r = 0 :: else -> skip fi;
	estate[e] = E_FREE;
	WAKE                    /* cistern__wake_all */
}

/*
 * cistern__sweep: reclaim every entry that is not free and whose lock is free,
 * holding its intent lock, then its lock.
 */
inline sweep() {
	e = 0;
	n = 0;
	do
	:: e < NENT ->
		if
		:: e + 1 != myent && estate[e] != E_FREE && lockh[e] == 0 ->
			if
			:: atomic { lockr[e] == 0 -> lockr[e] = me } ->
				if
				:: atomic { lockh[e] == 0 -> lockh[e] = me } ->
					if
					:: estate[e] != E_FREE -> reclaim(e); n++
					:: else -> skip
					fi;
					lockh[e] = 0
				:: else -> skip
				fi;
				lockr[e] = 0
			:: else -> skip
			fi
		:: else -> skip
		fi;
		e++
	:: else -> break
	od;
	if
	:: n > 0 -> WAKE
	:: else -> skip
	fi;
	e = 0
}

/*
 * cistern__claim_entry: take the intent lock, then the lock, of a free or dead
 * entry; reclaim it if dead.
 */
inline claim() {
	e = 0;
	myent = 0;
	do
	:: e < NENT && myent == 0 ->
		if
		:: atomic { lockr[e] == 0 -> lockr[e] = me } ->
			if
			:: atomic { lockh[e] == 0 -> lockh[e] = me } ->
				if
				:: estate[e] != E_FREE -> reclaim(e); n = 1
				:: else -> skip
				fi;
				estate[e] = E_ACTIVE;
				myent = e + 1;
				lockr[e] = 0;
				if
				:: n > 0 -> WAKE; n = 0
				:: else -> skip
				fi
			:: else -> lockr[e] = 0; e++
			fi
		:: else -> e++
		fi
	:: else -> break
	od;
	e = 0;
	assert(myent != 0)
}

/* What the kernel does when a process dies: its OFD locks go. */
inline drop_locks() {
	d_step {
		e = 0;
		do
		:: e < NENT ->
			if :: lockh[e] == me -> lockh[e] = 0 :: else -> skip fi;
			if :: lockr[e] == me -> lockr[e] = 0 :: else -> skip fi;
			e++
		:: else -> break
		od
	}
}

proctype Producer(byte first; byte count)
{
	byte me = _pid + 1, myent, e, k, n, t, i, s, swk;
	bool stalled;
#ifdef HANDBACK
	bool handed;
#endif
	{
		claim();
#ifdef SOLE
		/* cistern__take_sole: -EBUSY while a live producer holds it; we retry */
PROLE:		if
		:: atomic { sole_p == 0 -> sole_p = myent }
		:: DEADHOLDER(sole_p) -> sweep(); goto PROLE
		fi;
#endif
		s = first;
		do
		:: s < first + count ->
TOP:			if
			:: closed -> break                                  /* -EPIPE */
			:: else -> skip
			fi;
			t = tail;
			i = t % NSLOT;
			if
#ifdef SOLE
			:: wpos[i] == t && wst[i] == FREE ->                    /* reserve_sole: load */
				atomic { wst[i] = RES; wown[i] = myent };           /* T1, a plain store */
				tail = t + 1;                                       /* I1, a plain store */
#else
			:: atomic { wpos[i] == t && wst[i] == FREE -> wst[i] = RES; wown[i] = myent } -> /* T1 */
				help(tail, t);                                      /* I1 */
#endif
				if
				:: closed -> atomic { wst[i] = SKIP; wown[i] = 0; WAKE }; break   /* T3 */
				:: else -> skip
				fi;
				data[i] = s;
				atomic { wst[i] = COM; wown[i] = 0; published[s] = true; possample[t] = s; WAKE }; /* T2 */
				s++;
				t = 0;
				i = 0
			:: atomic { (wpos[i] == t && wst[i] != FREE) || wpos[i] > t } ->
				help(tail, t); goto TOP
			:: atomic { wpos[i] < t } ->
				if
				:: tail != t -> goto TOP
				:: else ->                                          /* full: wait */
					swk = wakes;
					if
					:: tail != t || wpos[i] >= t || closed -> stalled = false
					:: wakes != swk -> stalled = false
					:: ANYDEAD -> sweep(); stalled = false
					:: timeout -> assert(!stalled); stalled = true   /* the 200 ms wake */
					fi;
					swk = 0;
					goto TOP
				fi
			fi
		:: else -> break
		od;
		/* detach: give back what is left, free the entry, unlock */
		reclaim(myent - 1);
		lockh[myent - 1] = 0;
		pdone++
	} unless {
		killed[_pid] -> drop_locks(); pdone++
	}
}

proctype Reader()
{
	byte me = _pid + 1, myent, e, k, n, t, i, h, h0, got;
	byte swk;
	bool c0, stalled;
#ifdef HANDBACK
	bool handed;
#endif
	{
		claim();
		sweep();
#ifdef SOLE
RROLE:		if
		:: atomic { sole_r == 0 -> sole_r = myent }
		:: DEADHOLDER(sole_r) -> sweep(); goto RROLE
		fi;
#endif
LOOP:		swk = wakes;    /* the futex word, read before trying (lib/wait.c) */
		/* take_redelivered */
		h0 = hint;
		if
		:: h0 != 0 ->
			k = 0;
			do
			:: k < NSLOT ->
				if
				:: atomic { wst[k] == RED -> wst[k] = ACQ;                   /* T9 */
					if :: wown[k] != 0 -> redelivered[data[k]]++ :: else -> skip fi;
					wown[k] = myent; got = k + 1 } -> break
				:: else -> k++
				fi
			:: else -> break
			od;
			if
			:: got != 0 -> goto USE
			:: else -> atomic { if :: hint == h0 -> hint = 0 :: else -> skip fi }; k = 0
			fi
		:: else -> skip
		fi;
HEAD:		/* fifo_try_acquire */
		h = head;
		i = h % NSLOT;
		if
#ifdef SOLE
		:: wpos[i] == h && wst[i] == COM ->                                 /* holder_look: load */
			if
			:: atomic { wst[i] = ACQ; wown[i] = myent; got = i + 1 };   /* T5, a plain store */
				head = h + 1; goto USE                              /* I2, a plain store */
			:: assert(data[i] == possample[h]);     /* a one-step get of a line or less: the copy */
				atomic { received[data[i]]++; wst[i] = FREE; wpos[i] = h + NSLOT; WAKE }; /* T11 */
				/* cistern_get_batch() may go on to the next slot and move the head once */
				t = h + 1;
				k = t % NSLOT;
				if
				:: wpos[k] == t && wst[k] == COM ->
					assert(data[k] == possample[t]);
					atomic { received[data[k]]++; wst[k] = FREE; wpos[k] = t + NSLOT; WAKE }; /* T11 */
					t = t + 1
				:: true -> skip
				fi;
				head = t;                                           /* I2, a plain store */
				i = 0; h = 0; t = 0; k = 0; goto LOOP
			fi
#else
		:: atomic { wpos[i] == h && wst[i] == COM -> wst[i] = ACQ; wown[i] = myent; got = i + 1 } -> /* T5 */
			help(head, h); goto USE                                         /* I2 */
#endif
		:: atomic { wpos[i] == h && wst[i] == SKIP -> wst[i] = FREE; wpos[i] = h + NSLOT; WAKE } -> /* T10 */
			help(head, h); goto HEAD
		:: atomic { (wpos[i] == h && (wst[i] == ACQ || wst[i] == RED)) || wpos[i] > h } ->
			help(head, h); goto HEAD
		:: atomic { (wpos[i] == h && (wst[i] == FREE || wst[i] == RES)) || wpos[i] < h } ->
			if
			:: head != h -> goto HEAD
			:: else -> skip
			fi
		fi;
		/* fifo_drained, then the sweep and the reclaim check of cistern_acquire */
		c0 = closed;
		h0 = hint;
		t = tail;
		h = head;
		if
		:: c0 && h0 == 0 && h >= t ->
			sweep();
			if
			:: n > 0 -> goto LOOP
			:: else -> if :: !ANYRECL -> goto END :: else -> skip fi
			fi
		:: else -> skip
		fi;
		/* wait for a wake, sweeping when an attachment is dead */
		c0 = 0; h0 = 0; t = 0; h = 0; i = 0;
		if
		:: wakes != swk -> stalled = false
		:: ANYDEAD -> sweep(); stalled = false
		/*
		 * The periodic wake (CISTERN_SWEEP_MS): it fires here when nothing else
		 * can move. Twice in a row with nothing changed in between is a wedge.
		 */
		:: timeout -> assert(!stalled); stalled = true
		fi;
		goto LOOP;
USE:
		i = got - 1;
		got = 0;
		assert(data[i] == possample[wpos[i]]);      /* the sample of this position, undamaged */
#ifdef HANDBACK
		/* cistern_unacquire, at most HANDBACK times a run: T7, then the hint, two steps. */
		if
		:: handbacks < HANDBACK ->
			handbacks++;
			atomic { wst[i] = RED; wown[i] = 0; WAKE };                      /* T7 */
			hint++;
			i = 0; h = 0; h0 = 0; k = 0;
			goto LOOP
		:: true -> skip
		fi;
#endif
		received[data[i]]++;
		atomic { wst[i] = FREE; wpos[i] = wpos[i] + NSLOT; wown[i] = 0; WAKE };  /* T6 */
		i = 0; h = 0; h0 = 0; k = 0;
		goto LOOP;
END:
		eod = true;
		k = 1;
		do
		:: k <= NSAMPLE ->
			assert(!published[k] || received[k] > 0);            /* nothing lost */
			assert(received[k] <= 1 + redelivered[k]);           /* duplicates only by redelivery */
			k++
		:: else -> break
		od;
		reclaim(myent - 1);
		lockh[myent - 1] = 0
	} unless {
		killed[_pid] -> drop_locks(); run Reader()
	}
}

/* Closes reception at any moment, or once both producers are finished. */
proctype Closer()
{
	if
	:: skip
	:: pdone == 2
	fi;
	atomic { closed = true; WAKE }
}

/*
 * Kills any producer or reader (_pid 2, 3, 4, and 6 for a restarted reader;
 * 5 is the closer) at any moment, MAXKILLS times at most, or stops at any
 * moment: a killer that could always act would hide a wedge (spin reports a
 * final state where all are blocked only if the killer is done too).
 */
active proctype Killer()
{
	do
	:: kills < MAXKILLS && !killed[2] -> killed[2] = true; kills++
	:: kills < MAXKILLS && !killed[3] -> killed[3] = true; kills++
	:: kills < MAXKILLS && !killed[4] -> killed[4] = true; kills++
	:: kills < MAXKILLS && !killed[6] -> killed[6] = true; kills++
	:: break
	od
}

init
{
	byte k;
	d_step {
		k = 0;
		do
		:: k < NSLOT -> wpos[k] = k; k++
		:: else -> break
		od
	}
	atomic {
		run Producer(1, A_PUTS);        /* _pid 2 */
		run Producer(A_PUTS + 1, 1);    /* _pid 3 */
		run Reader();        /* _pid 4 */
		run Closer()         /* _pid 5 */
	}
}
