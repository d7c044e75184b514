/*
 * limiter.pml - a Promela model of the reservoirs' rate limiter
 * (lib/rate_limit.c) with producers and readers killed at any step, as
 * docs/POLICIES.md ("Rate limiter") and docs/protocol/reservoirs.md ("The rate
 * limiter") state it: one producer and NREAD readers, each restarted when
 * killed (as a supervisor would), NSLOT slots, puts that fill an empty slot or
 * evict a read, unpinned sample (the oldest one only, with -DFIFO_EVICT), reads
 * of BATCH distinct samples pinned while held, and a killer that SIGKILLs any
 * of them between any two steps, up to MAXKILLS times. Run it with
 * `bash model/check.sh --limiter`.
 *
 * The limiter: a read of n waits while reads + n > rpp * puts_after_fill +
 * read slack, a put while rpp * (puts_after_fill + 1) > reads + put slack,
 * unless some attachment is marked as waiting for the other side for
 * something else (a producer that found no slot it may take, a reader that
 * found too few samples); the mark wakes the other side, and is cleared by
 * the owner's next put or read and by the reclaim of its entry, and a
 * producer's by every read (it marks itself again if it still finds no slot,
 * so that reads pass one producer's look at a time). A reclaim of a
 * dead reader takes back the seen count of each sample it pinned, and the
 * read from the limiter with it; a reclaimer may die between the two, which
 * the model allows by sometimes not giving the read back (reads then stay
 * counted high, as they may in the library).
 *
 * Checked, in every interleaving: the producer puts all NPUTS samples and every
 * process ends (reception closes after the last put). Every wait ends by a
 * wake (where lib/ calls cistern__wake_producers, cistern__wake_readers or
 * wakes all) or by a sweep of a dead entry; there is no periodic timer here,
 * so spin reports any final state where some process still waits (the two
 * sides waiting for each other, or a wake the library forgot) as a deadlock.
 *
 * Granularity: a claim, a pin with its seen count, an eviction and each count
 * are one atomic step each; a commit is three (population, then HELD, then the
 * put counted), so a kill may leave `population` high or the put uncounted, as
 * in the library; a release or hand-back of a whole batch is one step. A
 * reclaim is one atomic step here (its own deaths are model/fifo.pml's, but
 * see above for the read it may leave counted); a call waits without a
 * timeout (a timeout clears the caller's mark, and its next try sets it again
 * before it waits). Counts of reads saturate at GCAP, above any level at which
 * the limiter decides differently.
 *
 * -DNO_ESCAPE takes the marks out: spin then finds the wedges the limiter
 * had, e.g. a FIFOEvictReservoir put waiting for its oldest sample while the
 * reads the puts allowed went elsewhere.
 */

#ifndef NSLOT
#define NSLOT 2
#endif
#ifndef WATERMARK
#define WATERMARK NSLOT
#endif
#ifndef NPUTS
#define NPUTS 4
#endif
#ifndef NREAD
#define NREAD 1
#endif
#ifndef BATCH
#define BATCH 1
#endif
/* reads_per_put = RPP_NUM / RPP_DEN; the slacks are counted in 1 / RPP_DEN reads. */
#ifndef RPP_NUM
#define RPP_NUM 1
#endif
#ifndef RPP_DEN
#define RPP_DEN 1
#endif
#ifndef SLACK
#define SLACK 0 /* 0: automatic */
#endif
#ifndef MAXKILLS
#define MAXKILLS 1
#endif

#define NENT (1 + NREAD) /* entry 0 is the producer's, 1.. the readers' */
#define NONE 255
#define SEENCAP 3

#define EMPTY 0
#define RES 1
#define HELD 2

byte st[NSLOT], seen[NSLOT], pins[NSLOT], own[NSLOT];
byte tail;             /* FIFOEvictReservoir: the next ring position */
byte population;       /* HELD samples, by count (may read high after a death) */
byte puts, gets;       /* rl_puts, rl_gets */
bool stuck[NENT];      /* rl_stuck: waits for the other side for something else */
bool dead[NENT];       /* killed, not reclaimed yet */
byte pidof[NENT];      /* the process holding the entry now */
bool killed[32];
byte kills;
bool closed;
bool woken[NENT];      /* a wake came since the entry's owner last looked */

/* cistern__wake_producers, cistern__wake_readers, cistern__wake_all */
#define WAKE_P woken[0] = true
#define WAKE_R woken[1] = true; if :: NENT > 2 -> woken[2] = true :: else -> skip fi
#define WAKE_ALL WAKE_P; WAKE_R
#define BIT(e) (1 << (e))
#define ANYDEAD (dead[0] || (NENT > 1 && dead[1]) || (NENT > 2 && dead[2]))
#ifdef NO_ESCAPE
#define ANYSTUCK false
#else
#define ANYSTUCK (stuck[0] || (NENT > 1 && stuck[1]) || (NENT > 2 && stuck[2]))
#endif

/* puts after the first WATERMARK, with `extra` more */
#define AFTER(extra) (puts + extra > WATERMARK -> puts + extra - WATERMARK : 0)
#define RSLACK (SLACK > 0 -> SLACK : (RPP_NUM > RPP_DEN * BATCH -> RPP_NUM : RPP_DEN * BATCH))
#define PSLACK (SLACK > 0 -> SLACK : RPP_NUM)
/* Reads counted past this are as good as more: every read waits for budget there. */
#define GCAP ((RPP_NUM * NPUTS + RSLACK) / RPP_DEN + BATCH + 1)
#define READ_OK (RPP_DEN * (gets + BATCH) <= RPP_NUM * AFTER(0) + RSLACK)
#define PUT_OK (RPP_NUM * AFTER(1) <= RPP_DEN * gets + PSLACK)
#define NEED (WATERMARK > BATCH -> WATERMARK : BATCH)

/* Evictable: held, read at least once, pinned by nobody. */
#define EVICTABLE(k) (st[k] == HELD && seen[k] > 0 && pins[k] == 0)
/* A member this read may still take: held, and not in this batch already. */
#define MEMBER(k) (st[k] == HELD && (pins[k] & BIT(e)) == 0)

/* Give back what entry d's dead owner held (cistern__rs_reclaim, drop_pins, rate_forget). */
inline reclaim(d) {
	k = 0;
	do
	:: k < NSLOT ->
		if
		:: st[k] == RES && own[k] == d -> st[k] = EMPTY; own[k] = NONE
		:: else -> skip
		fi;
		if
		:: (pins[k] & BIT(d)) != 0 ->
			if
			:: seen[k] > 0 ->
				seen[k]--;
				if
				:: gets > 0 -> gets--     /* the read goes back to the limiter */
				:: true -> skip           /* or not: its reclaimer died in between */
				fi
			:: else -> skip
			fi;
			pins[k] = pins[k] & ~BIT(d)
		:: else -> skip
		fi;
		k++
	:: else -> break
	od;
	k = 0;
	stuck[d] = false;
	dead[d] = false;
	WAKE_ALL
}

/* What a waiter's periodic sweep does: reclaim every dead entry. */
inline sweep() {
	atomic {
		d = 0;
		do
		:: d < NENT ->
			if
			:: dead[d] -> reclaim(d)
			:: else -> skip
			fi;
			d++
		:: else -> break
		od;
		d = 0
	}
}

/*
 * Wait for a wake that came since the try began (the futex word, read before
 * the try), or sweep a dead entry. No periodic timer: every wait must end by
 * a wake, so a wake the library forgot shows as a deadlock too.
 */
inline wait() {
	if
	:: woken[e] -> skip
	:: ANYDEAD -> sweep()
	fi
}

proctype Producer(byte e)
{
	byte i, k, d;
	bool ok;
	{
		/* A restarted producer's attach reclaims its predecessor's entry. */
		atomic { if :: dead[e] -> reclaim(e) :: else -> skip fi };
		do
		:: puts >= NPUTS -> break
		:: else ->
			/* the futex word read, reception open, cistern__rs_rate_allows_put */
			atomic {
				woken[e] = false;
				if
				:: closed -> break
				:: !closed && (PUT_OK || ANYSTUCK) -> skip
				:: else -> goto WAITP
				fi
			};
			/* the policy's try_reserve: fill, or evict, or nothing */
			atomic {
				ok = false;
#ifdef FIFO_EVICT
				i = tail % NSLOT;
				if
				:: st[i] == EMPTY -> ok = true
				:: EVICTABLE(i) -> ok = true; population--
				:: else -> skip
				fi;
				if :: ok -> tail++ :: else -> skip fi;
#else
				if
				:: st[0] == EMPTY -> i = 0; ok = true
				:: NSLOT > 1 && st[1] == EMPTY -> i = 1; ok = true
				:: NSLOT > 2 && st[2] == EMPTY -> i = 2; ok = true
				:: else ->
					if
					:: EVICTABLE(0) -> i = 0; ok = true
					:: NSLOT > 1 && EVICTABLE(1) -> i = 1; ok = true
					:: NSLOT > 2 && EVICTABLE(2) -> i = 2; ok = true
					:: else -> skip
					fi;
					if :: ok -> population-- :: else -> skip fi
				fi;
#endif
				if :: ok -> st[i] = RES; own[i] = e :: else -> skip fi
			};
			if
			:: atomic { !ok -> stuck[e] = true; WAKE_R };  /* cistern__rs_rate_stuck */
				goto WAITP
			:: else -> skip
			fi;
			/* cistern__rs_commit: population, the sample, the put counted, the wake */
			population++;
			atomic { st[i] = HELD; seen[i] = 0; own[i] = NONE };
			atomic { puts++; WAKE_R };
			atomic { stuck[e] = false; i = 0; ok = false };     /* it put: it waits no more */
			goto NEXT;
WAITP:
			atomic { i = 0; ok = false };
			wait();
NEXT:			skip
		od;
		stuck[e] = false          /* its detach */
	} unless {
		killed[_pid] -> dead[e] = true; pidof[e] = run Producer(e)
	}
}

proctype Reader(byte e)
{
	byte i, k, d, got, taken;
	{
		atomic { if :: dead[e] -> reclaim(e) :: else -> skip fi };
		/* the futex word read, reception open, the watermark */
LOOP:		atomic {
			woken[e] = false;
			if
			:: closed -> goto END
			:: !closed && population < NEED ->
				stuck[e] = true; WAKE_P; goto WAIT    /* waits for a put */
			:: else -> skip
			fi
		};
		/* cistern__rs_rate_take */
		atomic {
			if
			:: READ_OK || ANYSTUCK ->
				taken = BATCH;
				gets = (gets + BATCH > GCAP -> GCAP : gets + BATCH)
			:: else -> goto WAIT
			fi
		};
		/* draw: pin a member and count its read, member by member */
		do
		:: got < BATCH ->
			atomic {
				if
				:: MEMBER(0) -> i = 0
				:: NSLOT > 1 && MEMBER(1) -> i = 1
				:: NSLOT > 2 && MEMBER(2) -> i = 2
				:: else -> i = NONE
				fi;
				if
				:: i != NONE ->
					pins[i] = pins[i] | BIT(e);
					/* the read counted; a first read makes the sample evictable */
					if :: seen[i] == 0 -> WAKE_P :: else -> skip fi;
					seen[i] = (seen[i] < SEENCAP -> seen[i] + 1 : SEENCAP)
				:: else -> skip
				fi;
				if
				:: i == NONE -> break
				:: else -> got++
				fi
			}
		:: else -> break
		od;
		if
		:: got < BATCH ->
			/* short: hand the members back unread (one step), the budget back, and wait for a put */
			d_step {
				k = 0;
				do
				:: k < NSLOT ->
					if
					:: (pins[k] & BIT(e)) != 0 ->
						seen[k] = (seen[k] > 0 -> seen[k] - 1 : 0);
						pins[k] = pins[k] & ~BIT(e)
					:: else -> skip
					fi;
					k++
				:: else -> break
				od;
				k = 0;
				WAKE_P
			};
			atomic { gets = (gets >= taken -> gets - taken : 0); WAKE_R };
			atomic { stuck[e] = true; WAKE_P };
			goto WAIT
		:: else -> skip
		fi;
		/* cistern__rs_rate_settle: it read, it waits no more; producers may go on */
		atomic { stuck[e] = false; stuck[0] = false; WAKE_P };   /* and the producer looks again */
		/* release the batch (one step: a death in it is one before or after it) */
		d_step {
			k = 0;
			do
			:: k < NSLOT -> pins[k] = pins[k] & ~BIT(e); k++
			:: else -> break
			od;
			k = 0; i = 0; got = 0; taken = 0;
			WAKE_P
		};
		goto LOOP;
WAIT:
		i = 0; got = 0; taken = 0;
		wait();
		goto LOOP;
END:
		stuck[e] = false          /* its detach */
	} unless {
		killed[_pid] -> dead[e] = true; pidof[e] = run Reader(e)
	}
}

/* Closes reception once every sample is in: the readers then end. */
active proctype Closer()
{
	puts >= NPUTS -> atomic { closed = true; WAKE_ALL }
}

/*
 * Kills the producer or a reader at any moment, MAXKILLS times at most, or
 * stops at any moment (a killer that could always act would hide a wedge).
 */
active proctype Killer()
{
	byte v;
	do
	:: kills < MAXKILLS && pidof[0] != 0 && !killed[pidof[0]] ->
		killed[pidof[0]] = true; kills++
	:: kills < MAXKILLS && NENT > 1 && pidof[1] != 0 && !killed[pidof[1]] ->
		killed[pidof[1]] = true; kills++
	:: kills < MAXKILLS && NENT > 2 && pidof[2] != 0 && !killed[pidof[2]] ->
		killed[pidof[2]] = true; kills++
	:: break
	od
}

init
{
	byte k;
	atomic {
		k = 0;
		do
		:: k < NSLOT -> own[k] = NONE; k++
		:: else -> break
		od;
		pidof[0] = run Producer(0);
		k = 1;
		do
		:: k < NENT -> pidof[k] = run Reader(k); k++
		:: else -> break
		od
	}
}
