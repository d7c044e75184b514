/* SPDX-License-Identifier: MIT */
/* cmd_create.c - `cistern create`: make a segment and leave it for producers and readers. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>

#include "cli.h"

/*
 * One text, as `cistern help create` prints it, longer than the 4095 bytes
 * ISO C asks every compiler to take in a literal; gcc and clang take it.
 */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverlength-strings"
static const char usage[] =
	"Usage: cistern create NAME [--policy POLICY] [--slots N] [--slot-size BYTES] [OPTION...]\n"
	"Create segment NAME (/dev/shm/cistern.NAME) and leave it, unattached, for\n"
	"producers and readers. Numbers and sizes accept K, M, G suffixes (x1024).\n"
	"\n"
	"  -p, --policy POLICY     fifo (default), firo, reservoir, fifo-evict-reservoir,\n"
	"                          sim-paired-reservoir, batch-reservoir, prioritized\n"
	"  -s, --slots N           number of slots, the capacity (default 1024)\n"
	"  -z, --slot-size BYTES   largest payload (default 4K, or the schema's sample\n"
	"                          size with --schema)\n"
	"  -S, --schema TEXT       what every sample holds: named fields, each a dtype\n"
	"                          and a shape, e.g. 'obs:float32[84,84];action:int64[]'\n"
	"                          (dtypes int8..int64, uint8..uint64, float16, float32,\n"
	"                          float64, bool; see cistern(1)); put and get --fields\n"
	"                          and --json then read and write samples by field\n"
	"  -w, --watermark N       FIRO and reservoirs (which need it): population\n"
	"                          before reads start; FIRO: below --slots;\n"
	"                          batch-reservoir: at least --batch-size\n"
	"      --pseudo-epochs N   FIRO: reads of each sample (default 1)\n"
	"      --sweep-size N      sim-paired-reservoir (needs it), prioritized (windows):\n"
	"                          sim_id < N\n"
	"      --time-steps N      with --sweep-size (2 or more): time_step < N\n"
	"      --batch-size N      batch-reservoir (needs it): samples per batch\n"
	"      --alpha A           prioritized: draws by (priority + epsilon)^A, from 0\n"
	"                          (uniform, the default) to 8\n"
	"      --beta B            prioritized: exponent of the importance weights, from\n"
	"                          0 (the default) to 1; readers may change it later\n"
	"      --epsilon E         prioritized: added to every priority (default 0)\n"
	"  -m, --mode MODE         octal permission bits of the segment (default 0600)\n"
	"      --seed N            random seed (default: from the clock)\n"
	"      --max-procs N       attachment table size (default 64)\n"
	"      --producers N       reception closes after N producers said they are done;\n"
	"                          one that dies before it says so is waited for: a\n"
	"                          producer started in its place fills the count\n"
	"      --dead-producer-done\n"
	"                          with --producers: count a producer that dies before\n"
	"                          it said it is done as done (start no replacement)\n"
	"      --lossy             fifo-evict-reservoir: evict the oldest even if unseen\n"
	"      --single-producer   fifo: one producer at a time (others get EBUSY); a fifo\n"
	"                          without it is as fast while it has one producer\n"
	"      --single-reader     fifo and the reservoirs but firo: one reader at a time\n"
	"                          (others get EBUSY); a segment without it is as fast\n"
	"                          while it has one reader\n"
	"      --reads-per-put R   reservoir kinds: rate limiter, reads per put (0 = off,\n"
	"                          else 1 or more; below 1 only with --lossy)\n"
	"      --rate-slack S      the limiter's allowed drift, in reads (default:\n"
	"                          automatic, R for puts and for a batch of n reads\n"
	"                          the larger of R and n); set by hand, it is kept,\n"
	"                          and a batch above about 2S - R reads, which\n"
	"                          could never start, is refused at once\n"
	"      --max-times-sampled K\n"
	"                          reservoir kinds: a sample leaves after K reads (once\n"
	"                          its last reader lets go), its slot free for a put;\n"
	"                          not with --cold-slots, nor a --reads-per-put above K\n"
	"      --cold-slots N      fifo, reservoir, batch-reservoir, firo,\n"
	"                          fifo-evict-reservoir: a cold tier of N more slots\n"
	"                          on disk (needs --cold-dir); the population is\n"
	"                          --slots in memory plus N on disk (a fifo's puts\n"
	"                          go there once its memory is full)\n"
	"      --cold-dir DIR      the directory of the cold file DIR/cistern.NAME.cold,\n"
	"                          on a local file system that takes O_DIRECT (not\n"
	"                          /dev/shm); create allocates the whole file\n"
	"  -h, --help              show this help\n"
	"\n"
	"0 for --slots, --slot-size, --max-procs, --pseudo-epochs, --max-times-sampled\n"
	"or --mode is bad usage: leave the option out for its default.\n"
	"Policies this build does not implement are refused (exit 1).\n";
#pragma GCC diagnostic pop

const struct command cmd_create;

enum {
	O_PSEUDO = 256,
	O_SWEEP,
	O_STEPS,
	O_BATCH,
	O_SEED,
	O_PROCS,
	O_PRODUCERS,
	O_LOSSY,
	O_SOLE_P,
	O_SOLE_R,
	O_RATE,
	O_SLACK,
	O_DEAD_DONE,
	O_ALPHA,
	O_BETA,
	O_EPSILON,
	O_COLD_SLOTS,
	O_COLD_DIR,
	O_MAX_SAMPLED
};

/* A finite, non-negative real number. */
static int parse_real(const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= 0 && v <= 1e18))
		return -EINVAL;
	*out = v;
	return 0;
}

/*
 * The library names struct cistern_config's fields; say the options that set
 * them instead, word by word, into out (cap bytes).
 */
static void in_option_terms(const char *why, char *out, size_t cap)
{
	static const char *const words[][2] = {
		{"slot_count", "--slots"},
		{"slot_size", "--slot-size"},
		{"watermark", "--watermark"},
		{"pseudo_epochs", "--pseudo-epochs"},
		{"sweep_size", "--sweep-size"},
		{"nb_time_steps", "--time-steps"},
		{"batch_size", "--batch-size"},
		{"max_times_sampled", "--max-times-sampled"},
		{"max_procs", "--max-procs"},
		{"mode", "--mode"},
		{"reads_per_put", "--reads-per-put"},
		{"rate_slack", "--rate-slack"},
		{"alpha", "--alpha"},
		{"beta", "--beta"},
		{"epsilon", "--epsilon"},
		{"CISTERN_LOSSY", "--lossy"},
		{"CISTERN_SINGLE_PRODUCER", "--single-producer"},
		{"CISTERN_SINGLE_READER", "--single-reader"},
		{"CISTERN_DEAD_PRODUCER_DONE", "--dead-producer-done"},
		{"expected_producers", "--producers"},
		{"schema", "--schema"},
		{"cold_slots", "--cold-slots"},
		{"cold_dir", "--cold-dir"},
	};
	size_t o = 0;
	while (*why && o + 1 < cap) {
		/* A quoted word is the user's own (a field of the schema): kept as it is. */
		if (*why == '\'') {
			const char *q = strchr(why + 1, '\'');
			size_t len = q ? (size_t)(q + 1 - why) : strlen(why);
			if (o + len >= cap)
				break;
			memcpy(out + o, why, len);
			o += len;
			why += len;
			continue;
		}
		size_t n = strspn(why, "abcdefghijklmnopqrstuvwxyz"
				       "ABCDEFGHIJKLMNOPQRSTUVWXYZ_");
		const char *say = NULL;
		for (size_t i = 0; n && i < sizeof(words) / sizeof(words[0]); i++)
			if (strlen(words[i][0]) == n && !strncmp(why, words[i][0], n))
				say = words[i][1];
		size_t len = say ? strlen(say) : n ? n : 1;
		if (o + len >= cap)
			break;
		memcpy(out + o, say ? say : why, len);
		o += len;
		why += n ? n : 1;
	}
	out[o] = '\0';
}

/*
 * tmpfs takes O_DIRECT on recent kernels, so the library makes a cold file
 * there; but its pages are memory, and the tier then saves none. Say so.
 */
static void warn_if_in_memory(const char *name, const char *dir)
{
	struct statfs fs;
	if (!dir || statfs(dir, &fs) < 0)
		return;
	if (fs.f_type == 0x01021994 /* TMPFS_MAGIC */ || fs.f_type == 0x858458f6 /* RAMFS_MAGIC */)
		cli_error(&cmd_create, name, 0,
			  "warning: --cold-dir %s is in memory (tmpfs): the cold tier saves no "
			  "memory there; give a directory on a disk",
			  dir);
}

static int run(int argc, char **argv)
{
	static const struct option opts[] = {
		{"policy", required_argument, NULL, 'p'},
		{"slots", required_argument, NULL, 's'},
		{"slot-size", required_argument, NULL, 'z'},
		{"schema", required_argument, NULL, 'S'},
		{"watermark", required_argument, NULL, 'w'},
		{"pseudo-epochs", required_argument, NULL, O_PSEUDO},
		{"sweep-size", required_argument, NULL, O_SWEEP},
		{"time-steps", required_argument, NULL, O_STEPS},
		{"batch-size", required_argument, NULL, O_BATCH},
		{"mode", required_argument, NULL, 'm'},
		{"seed", required_argument, NULL, O_SEED},
		{"max-procs", required_argument, NULL, O_PROCS},
		{"producers", required_argument, NULL, O_PRODUCERS},
		{"lossy", no_argument, NULL, O_LOSSY},
		{"single-producer", no_argument, NULL, O_SOLE_P},
		{"single-reader", no_argument, NULL, O_SOLE_R},
		{"reads-per-put", required_argument, NULL, O_RATE},
		{"rate-slack", required_argument, NULL, O_SLACK},
		{"dead-producer-done", no_argument, NULL, O_DEAD_DONE},
		{"alpha", required_argument, NULL, O_ALPHA},
		{"beta", required_argument, NULL, O_BETA},
		{"epsilon", required_argument, NULL, O_EPSILON},
		{"cold-slots", required_argument, NULL, O_COLD_SLOTS},
		{"cold-dir", required_argument, NULL, O_COLD_DIR},
		{"max-times-sampled", required_argument, NULL, O_MAX_SAMPLED},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct cistern_config cfg = {0};
	const char *policy = "fifo";
	int o;
	while ((o = cli_getopt(&cmd_create, argc, argv, "p:s:z:S:w:m:h", opts)) != -1) {
		uint64_t v = 0;
		int bad = 0;
		switch (o) {
		case 'h':
			return cli_help(&cmd_create);
		case '?':
			return EXIT_USAGE;
		case 'p':
			policy = optarg;
			break;
		case 's':
			bad = parse_size(optarg, &cfg.slot_count);
			break;
		case 'z':
			bad = parse_size(optarg, &cfg.slot_size);
			break;
		case 'S':
			cfg.schema = optarg;
			break;
		case 'w':
			bad = parse_size(optarg, &cfg.watermark);
			break;
		case 'm': {
			char *end;
			errno = 0;
			unsigned long m = strtoul(optarg, &end, 8);
			bad = errno || *end || !*optarg || m > 07777 ? -EINVAL : 0;
			cfg.mode = (uint32_t)m;
			break;
		}
		case O_SEED:
			bad = parse_u64(optarg, &cfg.seed);
			break;
		case O_LOSSY:
			cfg.flags |= CISTERN_LOSSY;
			break;
		case O_SOLE_P:
			cfg.flags |= CISTERN_SINGLE_PRODUCER;
			break;
		case O_SOLE_R:
			cfg.flags |= CISTERN_SINGLE_READER;
			break;
		case O_DEAD_DONE:
			cfg.flags |= CISTERN_DEAD_PRODUCER_DONE;
			break;
		case O_RATE:
			bad = parse_real(optarg, &cfg.reads_per_put);
			break;
		case O_SLACK:
			bad = parse_real(optarg, &cfg.rate_slack);
			break;
		case O_ALPHA:
			bad = parse_real(optarg, &cfg.alpha);
			break;
		case O_BETA:
			bad = parse_real(optarg, &cfg.beta);
			break;
		case O_EPSILON:
			bad = parse_real(optarg, &cfg.epsilon);
			break;
		case O_COLD_SLOTS:
			bad = parse_size(optarg, &cfg.cold_slots);
			break;
		case O_COLD_DIR:
			cfg.cold_dir = optarg;
			break;
		default: {
			/* The 32-bit parameters. */
			bad = parse_size(optarg, &v);
			if (!bad && v > UINT32_MAX)
				bad = -EINVAL;
			uint32_t *dst = o == O_PSEUDO        ? &cfg.pseudo_epochs
					: o == O_SWEEP       ? &cfg.sweep_size
					: o == O_STEPS       ? &cfg.nb_time_steps
					: o == O_BATCH       ? &cfg.batch_size
					: o == O_PROCS       ? &cfg.max_procs
					: o == O_MAX_SAMPLED ? &cfg.max_times_sampled
							     : &cfg.expected_producers;
			*dst = (uint32_t)v;
			break;
		}
		}
		if (bad)
			return cli_usage(&cmd_create, "bad number or size '%s'", optarg);
		/*
		 * The library reads 0 as "the default" in these fields; said on
		 * the command line it is a mistake, not a wish for the default.
		 */
		const char *zero = NULL;
		if (o == 's' && cfg.slot_count == 0)
			zero = "--slots must be at least 1 (leave it out for the default, 1024)";
		else if (o == 'z' && cfg.slot_size == 0)
			zero = "--slot-size must be at least 1 (leave it out for the default, 4K)";
		else if (o == O_PROCS && cfg.max_procs == 0)
			zero = "--max-procs must be at least 1 (leave it out for the default, 64)";
		else if (o == O_MAX_SAMPLED && cfg.max_times_sampled == 0)
			zero = "--max-times-sampled must be at least 1 (leave it out for samples "
			       "that stay until evicted)";
		else if (o == O_PSEUDO && cfg.pseudo_epochs == 0)
			zero = "--pseudo-epochs must be at least 1 (leave it out for the default, "
			       "1)";
		else if (o == 'm' && cfg.mode == 0)
			zero = "--mode 0 would keep every user but root out of the segment (leave "
			       "it out "
			       "for the default, 0600)";
		if (zero)
			return cli_usage(&cmd_create, "%s", zero);
	}
	if (optind != argc - 1)
		return cli_usage(&cmd_create,
				 optind >= argc ? "missing NAME" : "too many arguments");
	const char *name = argv[optind];
	if (cistern_policy_parse(policy, &cfg.policy) < 0)
		return cli_usage(&cmd_create, "unknown policy '%s'", policy);
	int r = cistern_name_valid(name);
	if (r < 0)
		return cli_bad_name(&cmd_create, name, r);

	struct cistern *c;
	r = cistern_create(name, &cfg, &c);
	if (r == -ENOTSUP) {
		cli_error(&cmd_create, name, 0,
			  "policy '%s' is not implemented by this build of cistern", policy);
		return EXIT_FAIL;
	}
	if (r == -EINVAL) {
		const char *why = cistern_config_problem(&cfg);
		if (!why && cfg.cold_slots) {
			/* The config passed: the file system refused O_DIRECT (tiers.md). */
			cli_error(&cmd_create, name, r,
				  "the file system of --cold-dir %s refuses direct I/O (O_DIRECT); "
				  "use a local disk, not /dev/shm or a ramfs",
				  cfg.cold_dir);
			return EXIT_FAIL;
		}
		char said[512];
		in_option_terms(why ? why : cistern_strerror(r), said, sizeof(said));
		cli_error(&cmd_create, name, 0, "parameters refused for policy '%s': %s", policy,
			  said);
		return EXIT_FAIL;
	}
	if (r == -ENOSPC && cfg.cold_slots) {
		cli_error(&cmd_create, name, r,
			  "the disk of --cold-dir %s cannot hold %llu cold slots; nothing was "
			  "created",
			  cfg.cold_dir, (unsigned long long)cfg.cold_slots);
		return EXIT_FAIL;
	}
	if ((r == -ENOSYS || r == -EPERM) && cfg.cold_slots) {
		cli_error(&cmd_create, name, r,
			  "a cold tier reads and writes its file through io_uring, which this "
			  "process may not use (the kernel's io_uring_disabled setting, or a "
			  "seccomp filter of the container); nothing was created");
		return EXIT_FAIL;
	}
	if (r < 0) {
		cli_error(&cmd_create, name, r, NULL);
		return EXIT_FAIL;
	}
	warn_if_in_memory(name, cfg.cold_dir);
	cistern_detach(c);
	return EXIT_OK;
}

const struct command cmd_create = {"create", run, "create a segment", usage};
