/*
 * auto_roles.pml - a Promela model of the FIFO's automatic roles (lib/sole.c,
 * docs/protocol/roles.md, "The automatic roles"): three handles enter
 * one role, claim CLAIMS times each, and leave; one may be killed at any step.
 *
 * What it checks: a plain claim (the holder's, made with plain stores) never
 * overlaps a CAS claim of another handle, nor another plain claim; the mode
 * word's count never goes below zero; and once every handle has left or been
 * reclaimed, nobody holds the role and at most the killed handles' counts are
 * left in the word.
 *
 * Memory: the holder's stores to its auto_busy go through a store buffer
 * (x86-TSO: its later load of the mode word may be satisfied before they are
 * visible); a drainer process makes them visible one by one at any time.
 * Every compare-and-swap is a locked instruction: it waits for the buffer to
 * drain and acts on memory at once. A global membarrier waits until every
 * buffer has drained what it held when the call began. A plain claim is
 * "active" from the holder's load of the mode word until its release store
 * of auto_busy = 0 (which follows the claim's stores in the buffer) drains.
 *
 *   spin -a auto_roles.pml && gcc -O2 -DSAFETY -o pan pan.c && ./pan -m100000
 *
 * (bash model/check.sh --auto runs it.)
 */

#define N 3
#ifndef CLAIMS
#define CLAIMS 2
#endif
#ifndef MAXKILLS
#define MAXKILLS 1
#endif

/* The mode word, owner = handle index + 1 (0 = none). */
byte holder;
bool revoking;
byte count;

bool busy[N];           /* auto_busy as memory holds it */
bool entered[N];        /* the entry's auto_entered bit */
bool dead[N];
bool done[N];           /* left, or killed and reclaimed */
byte kills;

chan sb[N] = [4] of { bool };   /* handle i's pending auto_busy stores */
byte enq[N];
byte deq[N];

/* Ghost: a plain claim under way (see the top). */
bool plain_active[N];

#define OWN(i) (i + 1)
#define DRAINED(i) (len(sb[i]) == 0)
/* A plain claim under way; a dead holder's ends when its stores have drained. */
#define ACTIVE(i) (plain_active[i] && !(dead[i] && DRAINED(i)))

proctype drainer(byte i)
{
	bool v;
end:	do
	:: atomic {
		sb[i]?v ->
		busy[i] = v;
		if
		:: !v -> plain_active[i] = 0
		:: else
		fi;
		deq[i]++
	   }
	od
}

inline buffered_busy(i, v)
{
	atomic { sb[i]!v; enq[i]++ }
}

inline membarrier()
{
	atomic { t0 = enq[0]; t1 = enq[1]; t2 = enq[2] };
	(deq[0] >= t0 && deq[1] >= t1 && deq[2] >= t2)
}

/* leave_role(): give back the hold, or the count (the caller is atomic). */
inline leave_role(i)
{
	if
	:: holder == OWN(i) && revoking ->
		assert(count > 0);
		holder = 0; revoking = 0; count--
	:: holder == OWN(i) && !revoking -> holder = 0
	:: holder != OWN(i) && entered[i] && count > 0 -> count--
	:: else
	fi;
	entered[i] = 0
}

/* A CAS is one instant: it must find no plain claim under way. */
inline cas_claim()
{
	atomic { DRAINED(me) -> assert(!ACTIVE(0) && !ACTIVE(1) && !ACTIVE(2)) }
}

proctype handle(byte me)
{
	byte hold, k, t0, t1, t2;
	bool holding, shared, may_hold, fenced, b;

	{
		/* Registered for membarriers (may hold) or not; allowed to fence or not. */
		if
		:: may_hold = 1
		:: may_hold = 0
		fi;
		if
		:: fenced = 1
		:: fenced = 0
		fi;

		/* cistern__enter_auto(): one CAS on the mode word. */
		atomic {
			DRAINED(me) ->
			hold = holder;
			if
			:: holder == 0 && !revoking && count == 0 && may_hold ->
				holder = OWN(me); holding = 1
			:: holder == 0 && !(count == 0 && may_hold) ->
				count++; shared = 1
			:: holder != 0 && revoking -> count++; shared = 1
			:: holder != 0 && !revoking -> revoking = 1; count = count + 2; shared = 1
			fi
		};
		if
		:: hold != 0 ->
			/* finish_revoke() */
			if
			:: fenced -> membarrier()
			:: else
			fi;
			do
			:: !(holder == hold && revoking) -> break
			:: holder == hold && revoking ->
				b = busy[hold - 1];
				if
				:: (fenced && !b) || (dead[hold - 1] && DRAINED(hold - 1)) ->
					atomic {
						if
						:: holder == hold && revoking -> holder = 0; revoking = 0
						:: else
						fi
					}
				:: else
				fi
			:: holder == hold && revoking ->
				/* -EBUSY after a second: take our count back, enter nothing. */
				atomic { assert(count > 0); count--; shared = 0 };
				goto leave
			od
		:: else
		fi;
		entered[me] = 1;

		k = 0;
		do
		:: k == CLAIMS -> break
		:: k < CLAIMS && holding ->
			/* cistern__auto_begin(): store the bit, load the mode word. */
			buffered_busy(me, 1);
			if
			:: atomic {
				holder == OWN(me) && !revoking && count == 0 ->
				assert((me == 0 || !ACTIVE(0)) && (me == 1 || !ACTIVE(1)) &&
				       (me == 2 || !ACTIVE(2)));
				plain_active[me] = 1
			   };
			   /* The claim's stores, then cistern__auto_end(): release. */
			   buffered_busy(me, 0);
			   k++
			:: else ->
				buffered_busy(me, 0);
				/* cistern__auto_lost(): clear our own revocation. */
				atomic {
					DRAINED(me) ->
					if
					:: holder == OWN(me) && revoking -> holder = 0; revoking = 0
					:: else
					fi
				};
				holding = 0; shared = 1
			fi
		:: k < CLAIMS && shared ->
			/* plain_producer(): the one counted handle left takes the role back. */
			if
			:: atomic {
				DRAINED(me) && holder == 0 && !revoking && count == 1 && may_hold ->
				holder = OWN(me); count = 0; holding = 1; shared = 0
			   }
			:: else ->
				cas_claim();
				k++
			fi
		od;
leave:
		/* Detach: the reclaim of our own entry. */
		atomic { DRAINED(me) -> leave_role(me); done[me] = 1 }
	} unless { dead[me] }
}

inline kill(i)
{
	atomic { kills < MAXKILLS && !dead[i] && !done[i] -> dead[i] = 1; kills++ };
	/* A sweeper reclaims it once it is gone (its stores have drained). */
	atomic { DRAINED(i) -> leave_role(i); done[i] = 1 }
}

proctype killer()
{
end:	do
	:: kill(0)
	:: kill(1)
	:: kill(2)
	od
}

init
{
	atomic {
		run drainer(0); run drainer(1); run drainer(2);
		run handle(0); run handle(1); run handle(2);
		run killer()
	};
	(done[0] && done[1] && done[2]);
	assert(holder == 0 && !revoking && count <= kills)
}
