/* SPDX-License-Identifier: MIT */
/*
 * main.c - the `cistern` command: create, list, inspect, feed, drain, close,
 * remove, collect garbage, dump and restore shared-memory sample segments.
 * One file per command (cmd_*.c); this one dispatches and prints help.
 */
#include <string.h>

#include "cli.h"
#include <cistern/admin.h>

static const struct command *const commands[] = {
	&cmd_create, &cmd_ls,   &cmd_inspect, &cmd_put,   &cmd_get,    &cmd_close,    &cmd_rm,
	&cmd_gc,     &cmd_dump, &cmd_restore, &cmd_serve, &cmd_keygen, &cmd_exporter,
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static const struct command *find(const char *name)
{
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (strcmp(commands[i]->name, name) == 0)
			return commands[i];
	return NULL;
}

static void overview(FILE *f)
{
	fputs("Usage: cistern COMMAND [OPTION...] [ARG...]\n"
	      "Create, watch and manage cistern shared-memory sample segments "
	      "(/dev/shm/cistern.NAME).\n\nCommands:\n",
	      f);
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(f, "  %-9s %s\n", commands[i]->name, commands[i]->summary);
	fputs("\n'cistern help COMMAND' or 'cistern COMMAND --help' describes a command.\n"
	      "Exit status: 0 success, 1 failure, 2 bad usage.\n"
	      "Text other users control (process names, schemas, names stored in dumps,\n"
	      "paths) is printed escaped (\\e, \\xNN, ...): see cistern(1), Text from others.\n",
	      f);
}

static void version(void)
{
	printf("cistern %d.%d.%d (dump format %d)\n", CISTERN_VERSION_MAJOR, CISTERN_VERSION_MINOR,
	       CISTERN_VERSION_PATCH, CISTERN_DUMP_VERSION);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		overview(stderr);
		return EXIT_USAGE;
	}
	const char *a = argv[1];
	if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
		overview(stdout);
		return EXIT_OK;
	}
	if (strcmp(a, "--version") == 0 || strcmp(a, "-V") == 0) {
		version();
		return EXIT_OK;
	}
	if (strcmp(a, "help") == 0) {
		if (argc == 2) {
			overview(stdout);
			return EXIT_OK;
		}
		const struct command *c = find(argv[2]);
		if (!c) {
			fprintf(stderr, "cistern help: no command '%s'\nTry 'cistern --help'.\n",
				esc(argv[2]));
			return EXIT_USAGE;
		}
		return cli_help(c);
	}
	const struct command *c = find(a);
	if (!c) {
		fprintf(stderr, "cistern: no command '%s'\nTry 'cistern --help'.\n", esc(a));
		return EXIT_USAGE;
	}
	return c->run(argc - 1, argv + 1);
}
