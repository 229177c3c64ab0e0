/* mcp_tools: the MCP tools, on session/ops.
 *
 * Each tool has an input schema (checked here before anything runs, so the schema a client
 * sees is exactly the rule applied) and an output schema that its structuredContent always
 * satisfies: values that come from the sandbox are reshaped and type-checked, never passed
 * through. A tool that fails answers isError with the reason, never a protocol error. */
#include <errno.h>
#include <event2/event.h>
#include <event2/buffer.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "api/mcp.h"
#include "session/snapshot.h"
#include "session/volume.h"
#include "session/preview.h"
#include "util/cleanup.h"
#include "util/signame.h"
#include "util/log.h"
#include "util/time.h"
#include "util/timejson.h"
#include "util/text.h"

/* What read_file returns at most unless asked for more (an agent rarely wants more). */

/* --- schemas ------------------------------------------------------------------------ */

#define SESSION_ID                                                          \
	"{\"type\": \"string\", \"pattern\": \"^[A-Za-z0-9._-]{1,128}$\", " \
	"\"description\": \"Session id: 1-128 letters, digits, '-', '_' or '.'\"}"
#define TEMPLATE                                                                           \
	"{\"type\": \"string\", \"minLength\": 1, \"maxLength\": 128, \"description\": "   \
	"\"Template of a session created by this call (see list_templates); default: the " \
	"server's\"}"
#define SESSION_ENV                                                                 \
	"{\"type\": \"object\", \"additionalProperties\": {\"type\": \"string\"}, " \
	"\"description\": \"Environment variables of every command in the session\"}"
#define COMMAND_ENV                                                                 \
	"{\"type\": \"object\", \"additionalProperties\": {\"type\": \"string\"}, " \
	"\"description\": \"Environment variables for this command (over the session's)\"}"
#define COMMAND_USER                                                                               \
	"{\"type\": \"string\", \"enum\": [\"user\", \"root\"], \"default\": \"user\", "           \
	"\"description\": \"Who runs it: the sandbox's command user, or its own root (to install " \
	"system packages)\"}"
#define SESSION_SHAPE                                                                          \
	"{\"type\": \"object\", \"properties\": {"                                             \
	"\"sessionId\": {\"type\": \"string\"}, \"template\": {\"type\": \"string\"}, "        \
	"\"state\": {\"type\": \"string\", \"enum\": [\"creating\", \"ready\", "               \
	"\"destroying\", \"gone\", \"failed\", \"paused\"]}, "                                 \
	"\"createdAt\": {\"type\": \"string\", \"description\": \"ISO 8601\"}, "               \
	"\"idleTimeout\": {\"type\": \"integer\", \"description\": \"seconds\"}, "             \
	"\"running\": {\"type\": \"integer\", \"description\": \"operations in flight\"}, "    \
	"\"pausedAt\": {\"type\": \"string\", \"description\": \"ISO 8601, when paused\"}, "   \
	"\"pauseMode\": {\"type\": \"string\", \"enum\": [\"freeze\", \"hibernate\"]}, "       \
	"\"processesKept\": {\"type\": \"boolean\", \"description\": \"whether its processes " \
	"carry on after the resume (false: hibernated in a jail, they were ended)\"}, "        \
	"\"note\": {\"type\": \"string\"}}, "                                                  \
	"\"required\": [\"sessionId\", \"template\", \"state\", \"createdAt\", "               \
	"\"idleTimeout\", \"running\"]}"

static const char in_create_session[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": " SESSION_ID ", "
	"\"template\": " TEMPLATE ", "
	"\"env\": " SESSION_ENV ", "
	"\"idleTimeout\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 604800, "
	"\"description\": \"Seconds without use before the session is destroyed (or paused: "
	"onTimeout)\"}, "
	"\"onTimeout\": {\"type\": \"string\", \"enum\": [\"destroy\", \"pause\"], "
	"\"default\": \"destroy\", \"description\": \"What the idle timeout does: destroy the "
	"session, or pause it (resume_session brings it back as it was)\"}, "
	"\"egress\": {\"type\": \"object\", \"description\": \"The session's own egress "
	"policy {dns, dest, bandwidth}, which may only tighten the server's\"}, "
	"\"storage\": {\"type\": \"string\", \"enum\": [\"disk\", \"tmpfs\"], "
	"\"description\": \"jail: a writable root and /workspace on a disk of the session's own, "
	"or tmpfs charged to its memory; default the server's\"}, "
	"\"diskBytes\": {\"type\": \"integer\", \"minimum\": 1, "
	"\"description\": \"Size of the session's disk (or tmpfs workspace), within the "
	"server's cap\"}, "
	"\"volumes\": {\"type\": \"array\", \"maxItems\": 8, \"items\": {\"type\": \"object\", "
	"\"properties\": {\"name\": {\"type\": \"string\"}, \"path\": {\"type\": \"string\"}, "
	"\"readOnly\": {\"type\": \"boolean\"}}, \"required\": [\"name\", \"path\"], "
	"\"additionalProperties\": false}, \"description\": \"Persistent volumes (create_volume) "
	"to mount at absolute paths: read-write in one session at a time, read-only in any "
	"number\"}, "
	"\"snapshot\": {\"type\": \"string\", \"description\": \"Start it from one of your "
	"snapshots (snapshot_session) instead of a template: it then has the snapshot's "
	"template, resources and files (leave out template, storage, diskBytes and volumes)\"}}, "
	"\"additionalProperties\": false}";
static const char in_create_volume[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"name\": {\"type\": \"string\", \"pattern\": \"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$\"}, "
	"\"sizeBytes\": {\"type\": \"integer\", \"minimum\": 8388608, \"description\": "
	"\"Its size, a quota: a full volume is ENOSPC inside\"}}, "
	"\"required\": [\"name\", \"sizeBytes\"], \"additionalProperties\": false}";
static const char in_volume_name[] =
	"{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}}, "
	"\"required\": [\"name\"], \"additionalProperties\": false}";
#define VOLUME_SHAPE                                                                            \
	"{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, "            \
	"\"sizeBytes\": {\"type\": \"integer\"}, \"allocatedBytes\": {\"type\": \"integer\"}, " \
	"\"state\": {\"type\": \"string\"}, \"createdAt\": {\"type\": \"string\"}, "            \
	"\"mounts\": {\"type\": \"array\"}}, \"required\": [\"name\", \"sizeBytes\", "          \
	"\"state\"]}"
static const char out_create_volume[] = VOLUME_SHAPE;
static const char out_list_volumes[] =
	"{\"type\": \"object\", \"properties\": {\"volumes\": {\"type\": \"array\", "
	"\"items\": " VOLUME_SHAPE "}}, \"required\": [\"volumes\"]}";
static const char out_delete_volume[] =
	"{\"type\": \"object\", \"properties\": {\"deleted\": {\"type\": \"boolean\"}, "
	"\"name\": {\"type\": \"string\"}}, \"required\": [\"deleted\", \"name\"]}";
/* The session with the reference's "status" ("active": ready for commands) beside "state". */
static const char out_create_session[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": {\"type\": \"string\"}, \"template\": {\"type\": \"string\"}, "
	"\"state\": {\"type\": \"string\", \"enum\": [\"creating\", \"ready\", "
	"\"destroying\", \"gone\", \"failed\", \"paused\"]}, "
	"\"status\": {\"type\": \"string\", \"enum\": [\"active\"], \"description\": "
	"\"the session is ready for commands\"}, "
	"\"createdAt\": {\"type\": \"string\", \"description\": \"ISO 8601\"}, "
	"\"idleTimeout\": {\"type\": \"integer\", \"description\": \"seconds\"}, "
	"\"running\": {\"type\": \"integer\", \"description\": \"operations in flight\"}}, "
	"\"required\": [\"sessionId\", \"template\", \"state\", \"status\", \"createdAt\", "
	"\"idleTimeout\", \"running\"]}";

static const char out_session[] = SESSION_SHAPE;
static const char in_pause_session[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": " SESSION_ID ", "
	"\"mode\": {\"type\": \"string\", \"enum\": [\"freeze\", \"hibernate\"], "
	"\"default\": \"freeze\", \"description\": \"freeze: processes stop where they are, "
	"memory kept, they carry on after the resume. hibernate: the sandbox is freed and kept "
	"on disk (also across a server restart). On a VM (qemu) the whole VM is saved, its "
	"processes carry on after the resume; in a jail (a session with a disk) every process "
	"is ENDED, only the files are kept, and the resume starts the session afresh over "
	"them\"}}, "
	"\"required\": [\"sessionId\"], \"additionalProperties\": false}";

static const char in_fork_session[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": " SESSION_ID ", "
	"\"count\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 16, \"default\": 1, "
	"\"description\": \"how many forks\"}}, "
	"\"required\": [\"sessionId\"], \"additionalProperties\": false}";

static const char in_snapshot_session[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": " SESSION_ID ", "
	"\"name\": {\"type\": \"string\", \"pattern\": \"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$\", "
	"\"description\": \"the snapshot's name, unique among yours\"}, "
	"\"ttlSeconds\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"how long "
	"it is kept (default and most: the server's SANDBOX_SNAPSHOT_TTL)\"}}, "
	"\"required\": [\"sessionId\", \"name\"], \"additionalProperties\": false}";
#define SNAPSHOT_SHAPE                                                                         \
	"{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, "           \
	"\"template\": {\"type\": \"string\"}, \"driver\": {\"type\": \"string\"}, "           \
	"\"session\": {\"type\": \"string\"}, \"sizeBytes\": {\"type\": \"integer\"}, "        \
	"\"createdAt\": {\"type\": \"string\"}, \"expiresAt\": {\"type\": \"string\"}, "       \
	"\"processesKept\": {\"type\": \"boolean\"}}, \"required\": [\"name\", \"template\", " \
	"\"sizeBytes\", \"expiresAt\", \"processesKept\"]}"
static const char out_snapshot[] = SNAPSHOT_SHAPE;
static const char out_list_snapshots[] =
	"{\"type\": \"object\", \"properties\": {\"snapshots\": {\"type\": \"array\", "
	"\"items\": " SNAPSHOT_SHAPE "}}, \"required\": [\"snapshots\"]}";

static const char in_none[] = "{\"type\": \"object\", \"additionalProperties\": false}";
static const char out_list_templates[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"templates\": {\"type\": \"array\", \"items\": {\"type\": \"object\", \"properties\": {"
	"\"name\": {\"type\": \"string\"}, \"displayName\": {\"type\": \"string\"}, "
	"\"description\": {\"type\": \"string\"}, \"version\": {\"type\": \"string\"}, "
	"\"tools\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}}, "
	"\"memSizeMib\": {\"type\": \"integer\"}, \"vcpuCount\": {\"type\": \"integer\"}}, "
	"\"required\": [\"name\"]}}, "
	"\"default\": {\"type\": \"string\", \"description\": \"template of sessions created "
	"without one\"}}, "
	"\"required\": [\"templates\", \"default\"]}";

static const char in_execute[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": " SESSION_ID ", "
	"\"command\": {\"type\": \"string\", \"minLength\": 1, \"description\": \"Program to "
	"run; without args, a command line with shell syntax runs under /bin/sh -c\"}, "
	"\"args\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"description\": "
	"\"Arguments, passed as they are (no shell)\"}, "
	"\"env\": " COMMAND_ENV ", "
	"\"cwd\": {\"type\": \"string\", \"minLength\": 1, \"description\": \"Working "
	"directory, relative to the workspace\"}, "
	"\"user\": " COMMAND_USER ", "
	"\"timeout\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 604800000, "
	"\"description\": \"Milliseconds before the command is killed; 0: none; default: the "
	"server's\"}, "
	"\"stdin\": {\"type\": \"string\", \"description\": \"Standard input (then end of "
	"input)\"}, "
	"\"template\": " TEMPLATE "}, "
	"\"required\": [\"sessionId\", \"command\"], \"additionalProperties\": false}";
static const char out_execute[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": {\"type\": \"string\"}, \"execId\": {\"type\": \"string\"}, "
	"\"exitCode\": {\"type\": [\"integer\", \"null\"], \"description\": \"null when "
	"killed by a signal\"}, "
	"\"signal\": {\"type\": [\"string\", \"null\"]}, "
	"\"stdout\": {\"type\": \"string\"}, \"stderr\": {\"type\": \"string\"}, "
	"\"durationMs\": {\"type\": \"number\"}, \"timedOut\": {\"type\": \"boolean\"}, "
	"\"cancelled\": {\"type\": \"boolean\"}, \"oomKilled\": {\"type\": \"boolean\"}, "
	"\"truncated\": {\"type\": \"boolean\", \"description\": \"output beyond the "
	"server's limit was dropped\"}}, "
	"\"required\": [\"sessionId\", \"execId\", \"exitCode\", \"signal\", \"stdout\", "
	"\"stderr\", \"durationMs\", \"timedOut\", \"cancelled\", \"oomKilled\", "
	"\"truncated\"]}";

static const char in_write_file[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": " SESSION_ID ", "
	"\"path\": {\"type\": \"string\", \"minLength\": 1, \"description\": \"File path, "
	"relative to the workspace; missing directories are created\"}, "
	"\"content\": {\"type\": \"string\", \"description\": \"The contents: text, or base64 "
	"with encoding base64\"}, "
	"\"encoding\": {\"type\": \"string\", \"enum\": [\"utf8\", \"base64\"], \"default\": "
	"\"utf8\"}, "
	"\"mode\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 4095, \"description\": "
	"\"Permission bits (e.g. 493 for 0755)\"}, "
	"\"template\": " TEMPLATE "}, "
	"\"required\": [\"sessionId\", \"path\", \"content\"], \"additionalProperties\": false}";
static const char out_write_file[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": {\"type\": \"string\"}, \"path\": {\"type\": \"string\"}, "
	"\"size\": {\"type\": \"integer\", \"description\": \"bytes written\"}, "
	"\"bytesWritten\": {\"type\": \"integer\", \"description\": \"bytes written (the "
	"reference's name for size)\"}}, "
	"\"required\": [\"sessionId\", \"path\", \"size\", \"bytesWritten\"]}";

static const char in_read_file[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": " SESSION_ID ", "
	"\"path\": {\"type\": \"string\", \"minLength\": 1, \"description\": \"File path, "
	"relative to the workspace\"}, "
	"\"encoding\": {\"type\": \"string\", \"enum\": [\"utf8\", \"base64\"], \"description\": "
	"\"base64 forces base64; by default text comes as utf8 and anything else as base64\"}, "
	"\"maxBytes\": {\"type\": \"integer\", \"minimum\": 1, \"description\": \"Fail if the "
	"file is larger (default and most: the server's read_file limit, 4 MiB unless "
	"configured; read larger files with the REST API, which streams them)\"}}, "
	"\"required\": [\"sessionId\", \"path\"], \"additionalProperties\": false}";
static const char out_read_file[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": {\"type\": \"string\"}, \"path\": {\"type\": \"string\"}, "
	"\"content\": {\"type\": \"string\"}, "
	"\"encoding\": {\"type\": \"string\", \"enum\": [\"utf8\", \"base64\"]}, "
	"\"size\": {\"type\": \"integer\", \"description\": \"bytes\"}}, "
	"\"required\": [\"sessionId\", \"path\", \"content\", \"encoding\", \"size\"]}";

static const char in_list_files[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": " SESSION_ID ", "
	"\"path\": {\"type\": \"string\", \"description\": \"Directory, relative to the "
	"workspace; default: the workspace\"}, "
	"\"recursive\": {\"type\": \"boolean\", \"default\": false}}, "
	"\"required\": [\"sessionId\"], \"additionalProperties\": false}";
static const char out_list_files[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": {\"type\": \"string\"}, \"path\": {\"type\": \"string\"}, "
	"\"files\": {\"type\": \"array\", \"items\": {\"type\": \"object\", \"properties\": {"
	"\"path\": {\"type\": \"string\"}, \"name\": {\"type\": \"string\"}, "
	"\"type\": {\"type\": \"string\", \"enum\": [\"file\", \"dir\", \"symlink\", "
	"\"other\"]}, "
	"\"size\": {\"type\": \"integer\"}, \"mode\": {\"type\": \"integer\"}, "
	"\"mtime\": {\"type\": \"number\", \"description\": \"Unix seconds\"}}, "
	"\"required\": [\"path\", \"name\", \"type\", \"size\", \"mode\", \"mtime\"]}}, "
	"\"truncated\": {\"type\": \"boolean\"}}, "
	"\"required\": [\"sessionId\", \"path\", \"files\", \"truncated\"]}";

#define PATH_ARG(what)                                                      \
	"{\"type\": \"string\", \"minLength\": 1, \"description\": \"" what \
	", relative to the workspace\"}"

static const char in_stat_path[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": " SESSION_ID ", "
	"\"path\": " PATH_ARG("Path") "}, "
				      "\"required\": [\"sessionId\", \"path\"], "
				      "\"additionalProperties\": false}";
static const char out_stat_path[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": {\"type\": \"string\"}, \"path\": {\"type\": \"string\"}, "
	"\"type\": {\"type\": \"string\", \"enum\": [\"file\", \"dir\", \"symlink\", "
	"\"other\"]}, "
	"\"size\": {\"type\": \"integer\"}, \"mode\": {\"type\": \"integer\"}, "
	"\"mtime\": {\"type\": \"number\", \"description\": \"Unix seconds\"}}, "
	"\"required\": [\"sessionId\", \"path\", \"type\", \"size\", \"mode\", \"mtime\"]}";
static const char in_make_directory[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": " SESSION_ID ", "
	"\"path\": " PATH_ARG("Directory") ", "
					   "\"parents\": {\"type\": \"boolean\", \"default\": "
					   "true, \"description\": "
					   "\"Create missing parent directories too (and succeed "
					   "if it exists)\"}}, "
					   "\"required\": [\"sessionId\", \"path\"], "
					   "\"additionalProperties\": false}";
static const char in_remove_path[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": " SESSION_ID ", "
	"\"path\": " PATH_ARG("File or directory") ", "
						   "\"recursive\": {\"type\": \"boolean\", "
						   "\"default\": false, \"description\": "
						   "\"Remove a directory and everything in it\"}}, "
						   "\"required\": [\"sessionId\", \"path\"], "
						   "\"additionalProperties\": false}";
static const char out_path_changed[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": {\"type\": \"string\"}, \"path\": {\"type\": \"string\"}}, "
	"\"required\": [\"sessionId\", \"path\"]}";
static const char in_move_path[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": " SESSION_ID ", "
	"\"from\": " PATH_ARG(
		"What to move") ", "
				"\"to\": " PATH_ARG(
					"Where") ", "
						 "\"overwrite\": {\"type\": \"boolean\", "
						 "\"default\": true, \"description\": "
						 "\"Replace what is at the destination\"}}, "
						 "\"required\": [\"sessionId\", \"from\", \"to\"], "
						 "\"additionalProperties\": false}";
static const char out_move_path[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": {\"type\": \"string\"}, \"from\": {\"type\": \"string\"}, "
	"\"to\": {\"type\": \"string\"}}, "
	"\"required\": [\"sessionId\", \"from\", \"to\"]}";

static const char in_cancel[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": " SESSION_ID ", "
	"\"execId\": {\"type\": \"string\", \"minLength\": 1, \"description\": \"The command's "
	"id, from execute's progress notifications or result\"}}, "
	"\"required\": [\"sessionId\", \"execId\"], \"additionalProperties\": false}";
static const char out_cancel[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": {\"type\": \"string\"}, \"execId\": {\"type\": \"string\"}, "
	"\"cancelled\": {\"type\": \"boolean\"}}, "
	"\"required\": [\"sessionId\", \"execId\", \"cancelled\"]}";

static const char in_session_only[] = "{\"type\": \"object\", \"properties\": {"
				      "\"sessionId\": " SESSION_ID "}, "
				      "\"required\": [\"sessionId\"], \"additionalProperties\": "
				      "false}";
static const char out_reset[] = "{\"type\": \"object\", \"properties\": {"
				"\"sessionId\": {\"type\": \"string\"}, "
				"\"destroyed\": {\"type\": \"boolean\", \"description\": "
				"\"false when there was no such session\"}, "
				"\"message\": {\"type\": \"string\"}}, "
				"\"required\": [\"sessionId\", \"destroyed\"]}";

static const char out_ping[] = "{\"type\": \"object\", \"properties\": {"
			       "\"ok\": {\"type\": \"boolean\"}, "
			       "\"server\": {\"type\": \"string\"}, "
			       "\"version\": {\"type\": \"string\"}, "
			       "\"time\": {\"type\": \"string\", \"description\": \"ISO 8601\"}}, "
			       "\"required\": [\"ok\", \"server\", \"version\", \"time\"]}";

static const char out_list_sessions[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessions\": {\"type\": \"array\", \"items\": " SESSION_SHAPE
	"}, \"count\": {\"type\": \"integer\"}}, "
	"\"required\": [\"sessions\", \"count\"]}";

/* Background processes. */
#define PROC_REF                                                                            \
	"{\"type\": [\"string\", \"integer\"], \"minLength\": 1, \"maxLength\": 64, "       \
	"\"minimum\": 1, \"description\": \"The process: its pid (as the sandbox sees it) " \
	"or the tag it was started with\"}"
#define PROCESS_SHAPE                                                                           \
	"{\"type\": \"object\", \"properties\": {"                                              \
	"\"pid\": {\"type\": \"integer\"}, \"tag\": {\"type\": [\"string\", \"null\"]}, "       \
	"\"command\": {\"type\": \"string\"}, "                                                 \
	"\"argv\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}}, "                  \
	"\"cwd\": {\"type\": \"string\"}, \"pty\": {\"type\": \"boolean\"}, "                   \
	"\"state\": {\"type\": \"string\", \"enum\": [\"running\", \"exited\"]}, "              \
	"\"startedAt\": {\"type\": \"integer\", \"description\": \"ms since the epoch\"}, "     \
	"\"endedAt\": {\"type\": [\"integer\", \"null\"]}, "                                    \
	"\"exitCode\": {\"type\": [\"integer\", \"null\"], \"description\": \"null while "      \
	"running or when killed by a signal\"}, "                                               \
	"\"signal\": {\"type\": [\"string\", \"null\"]}, "                                      \
	"\"durationMs\": {\"type\": \"number\"}, \"timedOut\": {\"type\": \"boolean\"}, "       \
	"\"outputBytes\": {\"type\": \"integer\", \"description\": \"bytes of output so "       \
	"far\"}}, "                                                                             \
	"\"required\": [\"pid\", \"tag\", \"command\", \"argv\", \"cwd\", \"pty\", \"state\", " \
	"\"startedAt\", \"endedAt\", \"exitCode\", \"signal\", \"durationMs\", \"timedOut\", "  \
	"\"outputBytes\"]}"

static const char in_start_process[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": " SESSION_ID ", "
	"\"command\": {\"type\": \"string\", \"minLength\": 1, \"description\": \"Program to "
	"run; without args, a command line with shell syntax runs under /bin/sh -c\"}, "
	"\"args\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"description\": "
	"\"Arguments, passed as they are (no shell)\"}, "
	"\"tag\": {\"type\": \"string\", \"pattern\": \"^[A-Za-z0-9._:-]{1,64}$\", "
	"\"description\": \"A name for the process, unique among the session's running ones "
	"(not all digits)\"}, "
	"\"env\": " COMMAND_ENV ", "
	"\"cwd\": {\"type\": \"string\", \"minLength\": 1, \"description\": \"Working "
	"directory, relative to the workspace\"}, "
	"\"user\": " COMMAND_USER ", "
	"\"timeout\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 604800000, "
	"\"description\": \"Milliseconds before the process is killed; default and 0: "
	"none\"}, "
	"\"stdin\": {\"type\": \"boolean\", \"default\": false, \"description\": \"Keep its "
	"standard input open for send_process_input\"}, "
	"\"pty\": {\"type\": \"object\", \"properties\": {"
	"\"rows\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 1000}, "
	"\"cols\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 1000}}, "
	"\"additionalProperties\": false, \"description\": \"Run it on a terminal of this "
	"size (default 24 x 80)\"}, "
	"\"template\": " TEMPLATE "}, "
	"\"required\": [\"sessionId\", \"command\"], \"additionalProperties\": false}";
static const char out_process[] = "{\"type\": \"object\", \"properties\": {"
				  "\"sessionId\": {\"type\": \"string\"}, "
				  "\"process\": " PROCESS_SHAPE "}, "
				  "\"required\": [\"sessionId\", \"process\"]}";
static const char out_list_processes[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": {\"type\": \"string\"}, "
	"\"processes\": {\"type\": \"array\", \"items\": " PROCESS_SHAPE "}, "
	"\"count\": {\"type\": \"integer\"}}, "
	"\"required\": [\"sessionId\", \"processes\", \"count\"]}";
static const char in_read_process_output[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": " SESSION_ID ", "
	"\"ref\": " PROC_REF ", "
	"\"replayBytes\": {\"type\": \"integer\", \"minimum\": 0, \"description\": \"Only the "
	"last this many bytes of the output kept so far (default: all that is kept, up to the "
	"server's read limit, SANDBOX_MCP_MAX_READ_BYTES)\"}, "
	"\"waitMs\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 600000, "
	"\"description\": \"Wait up to this long for the process to end, collecting its "
	"output meanwhile (default 0: answer at once)\"}}, "
	"\"required\": [\"sessionId\", \"ref\"], \"additionalProperties\": false}";
static const char out_read_process_output[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": {\"type\": \"string\"}, "
	"\"process\": " PROCESS_SHAPE ", "
	"\"stdout\": {\"type\": \"string\"}, \"stderr\": {\"type\": \"string\"}, "
	"\"gapBytes\": {\"type\": \"integer\", \"description\": \"output lost before it was "
	"read (the process wrote faster than its replay buffer holds)\"}, "
	"\"truncated\": {\"type\": \"boolean\", \"description\": \"output beyond the server's "
	"read limit was left out\"}}, "
	"\"required\": [\"sessionId\", \"process\", \"stdout\", \"stderr\", \"gapBytes\", "
	"\"truncated\"]}";
static const char in_send_process_input[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": " SESSION_ID ", "
	"\"ref\": " PROC_REF ", "
	"\"data\": {\"type\": \"string\", \"description\": \"What to write to its standard "
	"input\"}, "
	"\"encoding\": {\"type\": \"string\", \"enum\": [\"utf8\", \"base64\"], \"default\": "
	"\"utf8\"}, "
	"\"close\": {\"type\": \"boolean\", \"default\": false, \"description\": \"Then close "
	"its standard input (a terminal gets ^D)\"}}, "
	"\"required\": [\"sessionId\", \"ref\"], \"additionalProperties\": false}";
static const char out_send_process_input[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": {\"type\": \"string\"}, \"ref\": {\"type\": \"string\"}, "
	"\"bytes\": {\"type\": \"integer\"}, \"closed\": {\"type\": \"boolean\"}}, "
	"\"required\": [\"sessionId\", \"ref\", \"bytes\", \"closed\"]}";
static const char in_signal_process[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": " SESSION_ID ", "
	"\"ref\": " PROC_REF ", "
	"\"signal\": {\"type\": [\"string\", \"integer\"], \"minLength\": 1, \"maxLength\": 16, "
	"\"minimum\": 1, \"maximum\": 64, \"description\": \"TERM, KILL, INT, HUP, QUIT, USR1, "
	"USR2, CONT, STOP, TSTP, WINCH, ALRM, or a number\"}}, "
	"\"required\": [\"sessionId\", \"ref\", \"signal\"], \"additionalProperties\": false}";
static const char out_signal_process[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": {\"type\": \"string\"}, \"ref\": {\"type\": \"string\"}, "
	"\"signal\": {\"type\": \"integer\"}, \"signalled\": {\"type\": \"boolean\"}}, "
	"\"required\": [\"sessionId\", \"ref\", \"signal\", \"signalled\"]}";

/* --- the table ---------------------------------------------------------------------- */

typedef void (*tool_fn)(struct mcp_call *c, json_t *args, const char *version);

/* wait_for_change */
#define WAIT_DEFAULT_MS 30000
/* Events that come this soon after the first are part of its batch. */
#define WAIT_BATCH_MS   100
#define WAIT_MAX_EVENTS 1000
static const char in_wait_for_change[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": " SESSION_ID ", "
	"\"path\": {\"type\": \"string\", \"minLength\": 1, \"description\": \"Directory to "
	"watch, relative to the workspace\"}, "
	"\"recursive\": {\"type\": \"boolean\", \"default\": false, \"description\": "
	"\"Watch the directories below it too\"}, "
	"\"timeoutMs\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 600000, "
	"\"default\": 30000, \"description\": \"How long to wait for a change\"}}, "
	"\"required\": [\"sessionId\", \"path\"], \"additionalProperties\": false}";
static const char out_wait_for_change[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": {\"type\": \"string\"}, \"path\": {\"type\": \"string\"}, "
	"\"events\": {\"type\": \"array\", \"items\": {\"type\": \"object\", \"properties\": {"
	"\"type\": {\"type\": \"string\", \"enum\": [\"create\", \"write\", \"remove\", "
	"\"rename\", \"chmod\", \"overflow\"]}, "
	"\"path\": {\"type\": \"string\"}, \"dir\": {\"type\": \"boolean\"}, "
	"\"from\": {\"type\": \"string\"}}, \"required\": [\"type\"]}}, "
	"\"timedOut\": {\"type\": \"boolean\"}}, "
	"\"required\": [\"sessionId\", \"path\", \"events\", \"timedOut\"]}";

/* Ports and previews (the REST API's GET /exec/:id/ports and /preview). */
#define PORT_URLS                                                                            \
	"\"url\": {\"type\": \"string\", \"description\": \"The host form: "                 \
	"http://PORT-NAME.DOMAIN:..., with a key of the session's owner or the token\"}, "   \
	"\"pathUrl\": {\"type\": \"string\", \"description\": \"The path form, on the "      \
	"server's own address: /exec/NAME/ports/PORT/\"}, "                                  \
	"\"public\": {\"type\": \"boolean\", \"description\": \"reachable without a key or " \
	"token\"}"
static const char out_list_ports[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": {\"type\": \"string\"}, "
	"\"ports\": {\"type\": \"array\", \"items\": {\"type\": \"object\", \"properties\": {"
	"\"port\": {\"type\": \"integer\"}, \"address\": {\"type\": \"string\", "
	"\"description\": \"the address it listens on in the sandbox\"}, " PORT_URLS "}, "
	"\"required\": [\"port\", \"address\", \"url\", \"pathUrl\", \"public\"]}}, "
	"\"truncated\": {\"type\": \"boolean\"}}, "
	"\"required\": [\"sessionId\", \"ports\", \"truncated\"]}";
static const char in_get_preview_url[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": " SESSION_ID ", "
	"\"port\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 65535, "
	"\"description\": \"A TCP port in the sandbox\"}, "
	"\"share\": {\"type\": \"boolean\", \"default\": false, \"description\": \"Also "
	"return shareUrl, which opens the preview in a browser without a key (it carries the "
	"session's preview token, which opens every port of the session until rotated)\"}}, "
	"\"required\": [\"sessionId\", \"port\"], \"additionalProperties\": false}";
static const char out_get_preview_url[] =
	"{\"type\": \"object\", \"properties\": {"
	"\"sessionId\": {\"type\": \"string\"}, \"port\": {\"type\": \"integer\"}, " PORT_URLS
	", \"listening\": {\"type\": \"boolean\", \"description\": \"whether something "
	"listens on the port now\"}, "
	"\"shareUrl\": {\"type\": \"string\", \"description\": \"with share: url with "
	"?sandbox_token=...\"}}, "
	"\"required\": [\"sessionId\", \"port\", \"url\", \"pathUrl\", \"public\", "
	"\"listening\"]}";

static void t_wait_for_change(struct mcp_call *c, json_t *args, const char *version);
static void t_create_session(struct mcp_call *c, json_t *args, const char *version);
static void t_list_templates(struct mcp_call *c, json_t *args, const char *version);
static void t_execute(struct mcp_call *c, json_t *args, const char *version);
static void t_write_file(struct mcp_call *c, json_t *args, const char *version);
static void t_read_file(struct mcp_call *c, json_t *args, const char *version);
static void t_list_files(struct mcp_call *c, json_t *args, const char *version);
static void t_stat_path(struct mcp_call *c, json_t *args, const char *version);
static void t_make_directory(struct mcp_call *c, json_t *args, const char *version);
static void t_remove_path(struct mcp_call *c, json_t *args, const char *version);
static void t_move_path(struct mcp_call *c, json_t *args, const char *version);
static void t_cancel(struct mcp_call *c, json_t *args, const char *version);
static void t_reset_session(struct mcp_call *c, json_t *args, const char *version);
static void t_list_sessions(struct mcp_call *c, json_t *args, const char *version);
static void t_pause_session(struct mcp_call *c, json_t *args, const char *version);
static void t_resume_session(struct mcp_call *c, json_t *args, const char *version);
static void t_fork_session(struct mcp_call *c, json_t *args, const char *version);
static void t_ping(struct mcp_call *c, json_t *args, const char *version);
static void t_start_process(struct mcp_call *c, json_t *args, const char *version);
static void t_list_processes(struct mcp_call *c, json_t *args, const char *version);
static void t_read_process_output(struct mcp_call *c, json_t *args, const char *version);
static void t_send_process_input(struct mcp_call *c, json_t *args, const char *version);
static void t_signal_process(struct mcp_call *c, json_t *args, const char *version);
static void t_snapshot_session(struct mcp_call *c, json_t *args, const char *version);
static void t_list_snapshots(struct mcp_call *c, json_t *args, const char *version);
static void t_delete_snapshot(struct mcp_call *c, json_t *args, const char *version);
static void t_create_volume(struct mcp_call *c, json_t *args, const char *version);
static void t_list_volumes(struct mcp_call *c, json_t *args, const char *version);
static void t_delete_volume(struct mcp_call *c, json_t *args, const char *version);
static void t_list_ports(struct mcp_call *c, json_t *args, const char *version);
static void t_get_preview_url(struct mcp_call *c, json_t *args, const char *version);

struct tool {
	const char *name;
	const char *title;
	const char *description;
	const char *in;
	const char *out;
	bool read_only, destructive, idempotent, open_world;
	tool_fn fn;
	json_t *in_schema, *out_schema; /* parsed once */
};

static struct tool tools[] = {
	{ "create_session", "Create a session",
	  "Create a new isolated Linux sandbox session from a template and return its id. "
	  "Optional: your own sessionId, the template, environment variables for every "
	  "command, and the idle timeout.",
	  in_create_session, out_create_session, false, false, false, false, t_create_session },
	{ "create_volume", "Create a volume",
	  "Create a persistent volume of the given size (an ext4 filesystem) that sessions "
	  "mount with create_session's volumes; its files outlive sessions and server restarts.",
	  in_create_volume, out_create_volume, false, false, false, false, t_create_volume },
	{ "list_volumes", "List volumes",
	  "List your persistent volumes: size, space used, and the sessions mounting each.",
	  in_none, out_list_volumes, true, false, true, false, t_list_volumes },
	{ "delete_volume", "Delete a volume",
	  "Delete a persistent volume and its files; refused while a session mounts it.",
	  in_volume_name, out_delete_volume, false, true, true, false, t_delete_volume },
	{ "list_templates", "List templates",
	  "List the environment templates sessions can be created from (name, description, "
	  "tools, resources) and the default one.",
	  in_none, out_list_templates, true, false, true, false, t_list_templates },
	{ "execute", "Run a command",
	  "Run a command in a session (created on first use) and return its exit code with "
	  "stdout and stderr kept apart. With a progress token, output is also sent as it "
	  "arrives in progress notifications; cancelling the request stops the command.",
	  in_execute, out_execute, false, true, false, true, t_execute },
	{ "write_file", "Write a file",
	  "Write a file in the session's workspace (the session is created on first use), "
	  "from text or base64, replacing it atomically.",
	  in_write_file, out_write_file, false, true, true, false, t_write_file },
	{ "read_file", "Read a file",
	  "Read a file from the session's workspace: text comes back as it is, binary data "
	  "as base64.",
	  in_read_file, out_read_file, true, false, true, false, t_read_file },
	{ "list_files", "List files",
	  "List a directory of the session's workspace, optionally recursively, with each "
	  "entry's type, size, mode and modification time.",
	  in_list_files, out_list_files, true, false, true, false, t_list_files },
	{ "stat_path", "Describe a path",
	  "Tell a path's type (file, dir, symlink, other), size, mode and modification time, "
	  "without following a symlink; an error if it does not exist.",
	  in_stat_path, out_stat_path, true, false, true, false, t_stat_path },
	{ "make_directory", "Make a directory",
	  "Create a directory in the session's workspace (the session is created on first "
	  "use), with its missing parents unless parents is false.",
	  in_make_directory, out_path_changed, false, false, true, false, t_make_directory },
	{ "remove_path", "Remove a file or directory",
	  "Remove a file, a symlink or an empty directory; with recursive, a directory and "
	  "everything in it (symlinks inside are removed, never followed).",
	  in_remove_path, out_path_changed, false, true, false, false, t_remove_path },
	{ "move_path", "Move or rename",
	  "Move or rename a file or directory within the workspace, creating the "
	  "destination's missing directories; replaces what is there unless overwrite is "
	  "false.",
	  in_move_path, out_move_path, false, true, false, false, t_move_path },
	{ "cancel", "Cancel a command",
	  "Stop a running command of a session by its execId (SIGTERM, then SIGKILL).", in_cancel,
	  out_cancel, false, true, true, false, t_cancel },
	{ "reset_session", "Destroy a session",
	  "Destroy a session and everything in it, releasing its resources.", in_session_only,
	  out_reset, false, true, true, false, t_reset_session },
	{ "pause_session", "Pause a session",
	  "Pause a session: its processes stop where they are and use no CPU, its memory, "
	  "files and background processes are kept; its commands and file operations are "
	  "refused until resume_session. Refused while a command or transfer of it runs. "
	  "mode hibernate frees its memory and keeps it on disk: a VM whole (its processes "
	  "carry on after the resume), a jail's files only (its processes are ended).",
	  in_pause_session, out_session, false, false, false, false, t_pause_session },
	{ "resume_session", "Resume a session",
	  "Resume a paused session: its processes carry on from where they stopped.",
	  in_session_only, out_session, false, false, false, false, t_resume_session },
	{ "fork_session", "Fork a session",
	  "Fork a running session into count new ones (1 to 16) from its current state, to "
	  "try several things from one point: on a VM (qemu) its memory and running "
	  "processes with a copy of its files, each fork with its own id, entropy and "
	  "network; the session runs on. In a jail (a session with a disk) a copy of its files "
	  "only, its processes are not forked. Answers once every fork is ready.",
	  in_fork_session, out_list_sessions, false, false, false, false, t_fork_session },
	{ "snapshot_session", "Snapshot a session",
	  "Save a running session under a name of yours, to start new sessions from later "
	  "(create_session's snapshot) as from a template: on a VM (qemu) its memory and "
	  "running processes with its files, in a jail (a session with a disk) its files "
	  "only. The session runs on. Kept until delete_snapshot or its ttlSeconds pass.",
	  in_snapshot_session, out_snapshot, false, false, false, false, t_snapshot_session },
	{ "list_snapshots", "List snapshots",
	  "List your snapshots: their template, size and when they expire.", in_none,
	  out_list_snapshots, true, false, true, false, t_list_snapshots },
	{ "delete_snapshot", "Delete a snapshot",
	  "Delete one of your snapshots and free what it holds; sessions made from it go on.",
	  in_volume_name, out_delete_volume, false, true, true, false, t_delete_snapshot },
	{ "list_sessions", "List sessions", "List your live sessions.", in_none, out_list_sessions,
	  true, false, true, false, t_list_sessions },
	{ "ping", "Ping", "Check that the sandbox server answers.", in_none, out_ping, true, false,
	  true, false, t_ping },
	{ "start_process", "Start a background process",
	  "Start a command in the background in a session (created on first use), for a "
	  "server, a watcher or a long job: it runs on after this call, its output kept for "
	  "read_process_output. Optional: a tag to name it by, stdin kept open for "
	  "send_process_input, a terminal (pty).",
	  in_start_process, out_process, false, true, false, true, t_start_process },
	{ "list_processes", "List background processes",
	  "List a session's background processes, running and recently ended, with their "
	  "state and exit status.",
	  in_session_only, out_list_processes, true, false, true, false, t_list_processes },
	{ "read_process_output", "Read a background process's output",
	  "Read what a background process wrote (stdout and stderr) and its state; with "
	  "waitMs, wait up to that long for it to end first, collecting output meanwhile.",
	  in_read_process_output, out_read_process_output, true, false, true, false,
	  t_read_process_output },
	{ "send_process_input", "Send input to a background process",
	  "Write to the standard input of a background process started with stdin (or a pty), "
	  "and close it with close.",
	  in_send_process_input, out_send_process_input, false, true, false, false,
	  t_send_process_input },
	{ "signal_process", "Signal a background process",
	  "Send a signal (TERM, INT, KILL...) to a background process and its children.",
	  in_signal_process, out_signal_process, false, true, false, false, t_signal_process },
	{ "wait_for_change", "Wait for a change",
	  "Wait until something changes in a directory of the session's workspace (a file or "
	  "directory created, written, removed, renamed or its mode changed; below it too "
	  "with recursive) and return that first batch of changes, or nothing once timeoutMs "
	  "passes.",
	  in_wait_for_change, out_wait_for_change, true, false, false, false, t_wait_for_change },
	{ "list_ports", "List listening ports",
	  "List the TCP ports that servers listen on in a session, each with the URLs that "
	  "reach it through the sandbox server (a preview: host form and path form) and "
	  "whether it is public.",
	  in_session_only, out_list_ports, true, false, true, false, t_list_ports },
	{ "get_preview_url", "Get a preview URL",
	  "Get the URLs that reach a port of a session through the sandbox server, and whether "
	  "something listens on it; with share, also a URL that opens it in a browser without "
	  "an API key.",
	  in_get_preview_url, out_get_preview_url, true, false, true, false, t_get_preview_url },
};

/* The page size of tools/list: all of them, today. */
#define TOOLS_PAGE 100

static void load_schemas(void)
{
	static bool loaded;
	if (loaded)
		return;
	loaded = true;
	for (size_t i = 0; i < ARRAY_SIZE(tools); i++) {
		json_error_t e;
		tools[i].in_schema = json_loads(tools[i].in, 0, &e);
		tools[i].out_schema = json_loads(tools[i].out, 0, &e);
		/* The schemas are constants: a typo is a bug to catch at the first request. */
		if (!tools[i].in_schema || !tools[i].out_schema) {
			log_error("mcp", "schema of tool %s: %s", tools[i].name, e.text);
			abort();
		}
	}
}

static struct tool *tool_find(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(tools); i++)
		if (strcmp(tools[i].name, name) == 0)
			return &tools[i];
	return NULL;
}

bool mcp_tool_exists(const char *name)
{
	return tool_find(name) != NULL;
}

static json_t *tool_json(const struct tool *t, const char *version)
{
	json_t *j = json_pack("{s:s, s:s, s:O}", "name", t->name, "description", t->description,
			      "inputSchema", t->in_schema);
	if (mcp_version_at_least(version, "2025-06-18")) {
		json_object_set_new(j, "title", json_string(t->title));
		json_object_set(j, "outputSchema", t->out_schema);
	}
	if (mcp_version_at_least(version, "2025-03-26"))
		json_object_set_new(j, "annotations",
				    json_pack("{s:s, s:b, s:b, s:b, s:b}", "title", t->title,
					      "readOnlyHint", t->read_only, "destructiveHint",
					      t->destructive, "idempotentHint", t->idempotent,
					      "openWorldHint", t->open_world));
	return j;
}

json_t *mcp_tools_list(const char *version, size_t offset)
{
	load_schemas();
	if (offset > ARRAY_SIZE(tools))
		return NULL;
	json_t *list = json_array();
	size_t end =
		offset + TOOLS_PAGE < ARRAY_SIZE(tools) ? offset + TOOLS_PAGE : ARRAY_SIZE(tools);
	for (size_t i = offset; i < end; i++)
		json_array_append_new(list, tool_json(&tools[i], version));
	json_t *page = json_pack("{s:o}", "tools", list);
	if (end < ARRAY_SIZE(tools)) {
		char cursor[24];
		snprintf(cursor, sizeof(cursor), "%zu", end);
		json_object_set_new(page, "nextCursor", json_string(cursor));
	}
	return page;
}

/* --- results ------------------------------------------------------------------------ */

/* structuredContent (from 2025-06-18), and its JSON as the text block every version reads. */
static void reply_ok(struct mcp_call *c, json_t *structured, const char *version)
{
	_cleanup_free_ char *text = json_dumps(structured, JSON_COMPACT | JSON_REAL_PRECISION(15));
	json_t *result = json_pack("{s:[{s:s, s:s}]}", "content", "type", "text", "text", text);
	if (mcp_version_at_least(version, "2025-06-18"))
		json_object_set_new(result, "structuredContent", structured);
	else
		json_decref(structured);
	mcp_call_reply(c, result);
}

static void reply_error(struct mcp_call *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void reply_error(struct mcp_call *c, const char *fmt, ...)
{
	char msg[ERR_MSG_MAX + 64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	mcp_call_reply(c, json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", msg,
				    "isError", 1));
}

static void reply_err(struct mcp_call *c, const struct err *err)
{
	reply_error(c, "%s", err->msg);
}

static struct ops_target target(struct mcp_call *c, json_t *args)
{
	return (struct ops_target){
		.owner = mcp_call_owner(c),
		.session_id = json_string_value(json_object_get(args, "sessionId")),
		.template_name = json_string_value(json_object_get(args, "template")),
	};
}

/* A session as the output schemas describe it, from its REST shape (session_json()). */
static json_t *session_shape(json_t *j)
{
	json_t *idle = json_object_get(j, "idleTimeout");
	json_t *running = json_object_get(j, "running");
	const char *created = json_string_value(json_object_get(j, "createdAt"));
	return json_pack("{s:s, s:s, s:s, s:s, s:I, s:I}", "sessionId",
			 json_string_value(json_object_get(j, "id")), "template",
			 json_string_value(json_object_get(j, "template")), "state",
			 json_string_value(json_object_get(j, "state")), "createdAt",
			 created ? created : "", "idleTimeout",
			 (json_int_t)json_integer_value(idle), "running",
			 (json_int_t)json_integer_value(running));
}

/* session_shape() with, for a paused session, when and how it was paused. */
static json_t *session_shape_paused(json_t *j)
{
	json_t *o = session_shape(j);
	static const char *const keys[] = { "pausedAt", "pauseMode", "processesKept", "note" };
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
		json_t *v = json_object_get(j, keys[i]);
		if (v)
			json_object_set(o, keys[i], v);
	}
	return o;
}

static json_t *session_shape_of(const struct session *s)
{
	json_auto_t *j = session_json(s);
	return session_shape(j);
}

/* Every tool that runs an ops_call: its answer arrives in a done callback. */
struct call_state {
	struct mcp_call *c;
	struct ops_call *op;
	char version[16];
	bool want_base64;
	bool at_cap; /* read_file: the limit is SANDBOX_MCP_MAX_READ_BYTES, not a smaller maxBytes
		      */
};

static void call_state_cancel(struct mcp_call *c, void *state)
{
	struct call_state *st = state;
	ops_call_detach(st->op);
	free(st);
}

static void start_call(struct mcp_call *c, struct call_state *st, struct ops_call *op,
		       const struct err *err)
{
	if (!op) {
		free(st);
		reply_err(c, err);
		return;
	}
	st->c = c;
	st->op = op;
	struct mcp_tool_run run = { .cancel = call_state_cancel, .state = st };
	mcp_call_set_run(c, &run);
}

static struct call_state *call_state_new(const char *version)
{
	struct call_state *st = xcalloc(1, sizeof(*st));
	snprintf(st->version, sizeof(st->version), "%s", version);
	return st;
}

/* --- tools -------------------------------------------------------------------------- */

static void created(struct ops_call *op, const struct ops_result *r, const struct err *err,
		    void *arg)
{
	struct call_state *st = arg;
	if (err)
		reply_err(st->c, err);
	else {
		/* A created session is ready: the reference's "status" says so. */
		json_t *j = session_shape_of(r->session);
		json_object_set_new(j, "status", json_string("active"));
		reply_ok(st->c, j, st->version);
	}
	free(st);
}

static void t_create_session(struct mcp_call *c, json_t *args, const char *version)
{
	struct ops_target t = target(c, args);
	json_t *idle = json_object_get(args, "idleTimeout");
	struct call_state *st = call_state_new(version);
	struct ops_session_opts o = { .env = json_object_get(args, "env"),
				      .egress = json_object_get(args, "egress"),
				      .volumes = json_object_get(args, "volumes"),
				      .snapshot = json_string_value(
					      json_object_get(args, "snapshot")) };
	if (idle)
		o.idle_timeout_s = (unsigned)json_integer_value(idle);
	const char *on_timeout = json_string_value(json_object_get(args, "onTimeout"));
	if (on_timeout && strcmp(on_timeout, "pause") == 0)
		o.on_timeout = SESSION_ON_TIMEOUT_PAUSE;
	/* The schema took only "disk" or "tmpfs", and a positive diskBytes. */
	struct session_resources res = { 0 };
	const char *storage = json_string_value(json_object_get(args, "storage"));
	json_t *disk = json_object_get(args, "diskBytes");
	if (storage)
		res.storage =
			strcmp(storage, "disk") == 0 ? SESSION_STORAGE_DISK : SESSION_STORAGE_TMPFS;
	if (json_is_integer(disk) && json_integer_value(disk) > 0)
		res.workspace_bytes = (uint64_t)json_integer_value(disk);
	if (storage || res.workspace_bytes)
		o.resources = &res;
	struct err e;
	struct ops_call *op = ops_create_session(&t, &o, created, st, &e);
	start_call(c, st, op, &e);
}

/* A volume being made outlives a cancelled call: its state stays until the volume is done. */
struct volume_call {
	struct mcp_call *c; /* NULL once cancelled */
	char version[32];
};

static void volume_call_cancel(struct mcp_call *c, void *state)
{
	struct volume_call *vc = state;
	vc->c = NULL;
}

static void volume_made(json_t *volume, const struct err *err, void *arg)
{
	struct volume_call *vc = arg;
	if (vc->c && err)
		reply_err(vc->c, err);
	else if (vc->c)
		reply_ok(vc->c, json_incref(volume), vc->version);
	free(vc);
}

static void t_create_volume(struct mcp_call *c, json_t *args, const char *version)
{
	struct volume_call *vc = xcalloc(1, sizeof(*vc));
	vc->c = c;
	snprintf(vc->version, sizeof(vc->version), "%s", version);
	json_t *size = json_object_get(args, "sizeBytes");
	struct err e;
	if (volume_create(mcp_call_owner(c), json_string_value(json_object_get(args, "name")),
			  json_integer_value(size) > 0 ? (uint64_t)json_integer_value(size) : 0,
			  volume_made, vc, &e) < 0) {
		free(vc);
		reply_err(c, &e);
		return;
	}
	struct mcp_tool_run run = { .cancel = volume_call_cancel, .state = vc };
	mcp_call_set_run(c, &run);
}

static void t_list_volumes(struct mcp_call *c, json_t *args, const char *version)
{
	reply_ok(c, json_pack("{s:o}", "volumes", volume_list(mcp_call_owner(c))), version);
}

static void t_delete_volume(struct mcp_call *c, json_t *args, const char *version)
{
	const char *name = json_string_value(json_object_get(args, "name"));
	struct err e;
	if (volume_delete(mcp_call_owner(c), name, false, &e) < 0)
		reply_err(c, &e);
	else
		reply_ok(c, json_pack("{s:b, s:s}", "deleted", 1, "name", name), version);
}

static void t_list_templates(struct mcp_call *c, json_t *args, const char *version)
{
	const struct template_registry *reg = session_templates();
	json_t *list = json_array();
	for (size_t i = 0; i < reg->n; i++) {
		const struct template *t = reg->items[i];
		json_t *m = t->manifest;
		json_t *o = json_pack("{s:s}", "name", t->name);
		static const char *const texts[] = { "displayName", "description", "version" };
		for (size_t k = 0; k < ARRAY_SIZE(texts); k++) {
			json_t *v = json_object_get(m, texts[k]);
			if (json_is_string(v))
				json_object_set(o, texts[k], v);
		}
		json_t *tl = json_object_get(m, "tools");
		if (json_is_array(tl)) {
			json_t *names = json_array();
			size_t j;
			json_t *v;
			json_array_foreach (tl, j, v)
				if (json_is_string(v))
					json_array_append(names, v);
			json_object_set_new(o, "tools", names);
		}
		json_object_set_new(o, "memSizeMib",
				    json_integer(t->mem_mib ? t->mem_mib : api_cfg->mem_mib));
		json_object_set_new(o, "vcpuCount",
				    json_integer(t->vcpus ? t->vcpus : api_cfg->vcpus));
		json_array_append_new(list, o);
	}
	reply_ok(c,
		 json_pack("{s:o, s:s}", "templates", list, "default", api_cfg->default_template),
		 version);
}

static void t_ping(struct mcp_call *c, json_t *args, const char *version)
{
	reply_ok(c,
		 json_pack("{s:b, s:s, s:s, s:o}", "ok", 1, "server", "agent-sandbox", "version",
			   SANDBOX_VERSION, "time", time_iso8601_json(time_wall_ms())),
		 version);
}

static void t_list_sessions(struct mcp_call *c, json_t *args, const char *version)
{
	struct ops_target t = { .owner = mcp_call_owner(c) };
	json_auto_t *rest = ops_list_sessions(&t);
	json_t *list = json_array();
	size_t i;
	json_t *v;
	json_array_foreach (rest, i, v)
		json_array_append_new(list, session_shape_paused(v));
	reply_ok(c, json_pack("{s:o, s:i}", "sessions", list, "count", (int)json_array_size(list)),
		 version);
}

/* A pause or resume outlives a cancelled call: its state stays until the session answers. */
struct pause_call {
	struct mcp_call *c; /* NULL once cancelled */
	char version[32];
};

static void pause_call_cancel(struct mcp_call *c, void *state)
{
	struct pause_call *pc = state;
	pc->c = NULL;
}

static void paused(struct session *s, const struct err *err, void *arg)
{
	struct pause_call *pc = arg;
	if (pc->c && err) {
		reply_err(pc->c, err);
	} else if (pc->c) {
		json_auto_t *j = session_json(s);
		reply_ok(pc->c, session_shape_paused(j), pc->version);
	}
	free(pc);
}

static void pause_or_resume(struct mcp_call *c, json_t *args, const char *version, bool pause)
{
	struct ops_target t = target(c, args);
	struct pause_call *pc = xcalloc(1, sizeof(*pc));
	pc->c = c;
	snprintf(pc->version, sizeof(pc->version), "%s", version);
	struct err e;
	const char *m = json_string_value(json_object_get(args, "mode"));
	enum session_pause_mode mode =
		m && strcmp(m, "hibernate") == 0 ? SESSION_PAUSE_HIBERNATE : SESSION_PAUSE_FREEZE;
	if (ops_pause_session_mode(&t, pause, mode, paused, pc, &e) < 0) {
		free(pc);
		reply_err(c, &e);
		return;
	}
	struct mcp_tool_run run = { .cancel = pause_call_cancel, .state = pc };
	mcp_call_set_run(c, &run);
}

static void t_pause_session(struct mcp_call *c, json_t *args, const char *version)
{
	pause_or_resume(c, args, version, true);
}

static void t_resume_session(struct mcp_call *c, json_t *args, const char *version)
{
	pause_or_resume(c, args, version, false);
}

static void forked(json_t *forks, const struct err *err, void *arg)
{
	struct pause_call *pc = arg;
	if (pc->c && err) {
		reply_err(pc->c, err);
	} else if (pc->c) {
		json_t *list = json_array();
		size_t i;
		json_t *v;
		json_array_foreach (forks, i, v) {
			json_t *o = session_shape_paused(v);
			json_t *why = json_object_get(v, "error");
			if (o && why)
				json_object_set(o, "error", why);
			if (o)
				json_array_append_new(list, o);
		}
		reply_ok(pc->c,
			 json_pack("{s:o, s:i}", "sessions", list, "count",
				   (int)json_array_size(list)),
			 pc->version);
	}
	free(pc);
}

static void t_fork_session(struct mcp_call *c, json_t *args, const char *version)
{
	struct ops_target t = target(c, args);
	json_t *n = json_object_get(args, "count");
	json_int_t count = n ? json_integer_value(n) : 1;
	struct err e;
	if (n && (!json_is_integer(n) || count < 1 || count > OPS_FORK_MAX)) {
		err_set(&e, EINVAL, "count must be an integer from 1 to %d", OPS_FORK_MAX);
		reply_err(c, &e);
		return;
	}
	struct pause_call *pc = xcalloc(1, sizeof(*pc));
	pc->c = c;
	snprintf(pc->version, sizeof(pc->version), "%s", version);
	if (ops_fork_session(&t, (unsigned)count, forked, pc, &e) < 0) {
		free(pc);
		reply_err(c, &e);
		return;
	}
	struct mcp_tool_run run = { .cancel = pause_call_cancel, .state = pc };
	mcp_call_set_run(c, &run);
}

static void snapshotted(json_t *snapshot, const struct err *err, void *arg)
{
	struct pause_call *pc = arg;
	if (pc->c && err)
		reply_err(pc->c, err);
	else if (pc->c)
		reply_ok(pc->c, json_incref(snapshot), pc->version);
	free(pc);
}

static void t_snapshot_session(struct mcp_call *c, json_t *args, const char *version)
{
	struct ops_target t = target(c, args);
	json_t *ttl = json_object_get(args, "ttlSeconds");
	struct pause_call *pc = xcalloc(1, sizeof(*pc));
	pc->c = c;
	snprintf(pc->version, sizeof(pc->version), "%s", version);
	struct err e;
	if (ops_snapshot_session(&t, json_string_value(json_object_get(args, "name")),
				 json_integer_value(ttl) > 0 ? (uint64_t)json_integer_value(ttl)
							     : 0,
				 snapshotted, pc, &e) < 0) {
		free(pc);
		reply_err(c, &e);
		return;
	}
	struct mcp_tool_run run = { .cancel = pause_call_cancel, .state = pc };
	mcp_call_set_run(c, &run);
}

static void t_list_snapshots(struct mcp_call *c, json_t *args, const char *version)
{
	reply_ok(c, json_pack("{s:o}", "snapshots", snapshot_list(mcp_call_owner(c))), version);
}

static void t_delete_snapshot(struct mcp_call *c, json_t *args, const char *version)
{
	const char *name = json_string_value(json_object_get(args, "name"));
	struct err e;
	if (snapshot_delete(mcp_call_owner(c), name, false, &e) < 0)
		reply_err(c, &e);
	else
		reply_ok(c, json_pack("{s:b, s:s}", "deleted", 1, "name", name), version);
}

/* Answered once the session is gone (its volumes free for the next one). */
struct reset_call {
	struct pause_call pc; /* a cancelled call's state stays until then, as a pause's */
	char session_id[129]; /* session_id_valid(): 128 at most */
};

static void reset_done(void *arg)
{
	struct reset_call *rc = arg;
	if (rc->pc.c)
		reply_ok(rc->pc.c,
			 json_pack("{s:s, s:b}", "sessionId", rc->session_id, "destroyed", 1),
			 rc->pc.version);
	free(rc);
}

static void t_reset_session(struct mcp_call *c, json_t *args, const char *version)
{
	struct ops_target t = target(c, args);
	struct err e;
	struct reset_call *rc = xcalloc(1, sizeof(*rc));
	rc->pc.c = c;
	snprintf(rc->pc.version, sizeof(rc->pc.version), "%s", version);
	snprintf(rc->session_id, sizeof(rc->session_id), "%s", t.session_id ? t.session_id : "");
	/* Before the destroy: its end may come at once. */
	struct mcp_tool_run run = { .cancel = pause_call_cancel, .state = &rc->pc };
	mcp_call_set_run(c, &run);
	if (ops_destroy_session(&t, "reset by an MCP client", reset_done, rc, &e) < 0) {
		free(rc);
		/* No such session is a result, not a failure (the tool is idempotent), as the
		 * reference's and REST's DELETE answer it: destroyed false. */
		if (e.errnum == ENOENT && t.session_id) {
			reply_ok(c,
				 json_pack("{s:s, s:b, s:s}", "sessionId", t.session_id,
					   "destroyed", 0, "message", e.msg),
				 version);
			return;
		}
		reply_err(c, &e);
	}
}

static void t_cancel(struct mcp_call *c, json_t *args, const char *version)
{
	struct ops_target t = target(c, args);
	const char *exec_id = json_string_value(json_object_get(args, "execId"));
	struct err e;
	if (ops_cancel_exec(&t, exec_id, &e) < 0) {
		reply_err(c, &e);
		return;
	}
	reply_ok(c,
		 json_pack("{s:s, s:s, s:b}", "sessionId", t.session_id, "execId", exec_id,
			   "cancelled", 1),
		 version);
}

static void written(struct ops_call *op, const struct ops_result *r, const struct err *err,
		    void *arg)
{
	struct call_state *st = arg;
	if (err)
		reply_err(st->c, err);
	else
		reply_ok(st->c,
			 json_pack("{s:s, s:s, s:I, s:I}", "sessionId", r->session_id, "path",
				   r->path, "size", (json_int_t)r->size, "bytesWritten",
				   (json_int_t)r->size),
			 st->version);
	free(st);
}

static void t_write_file(struct mcp_call *c, json_t *args, const char *version)
{
	struct ops_target t = target(c, args);
	json_t *content = json_object_get(args, "content");
	const char *encoding = json_string_value(json_object_get(args, "encoding"));
	json_t *mode = json_object_get(args, "mode");
	const char *text = json_string_value(content);
	size_t tlen = json_string_length(content);
	uint8_t *data;
	size_t len;
	if (encoding && strcmp(encoding, "base64") == 0) {
		if (base64_decode(text, tlen, &data, &len) < 0) {
			reply_error(c, "content is not valid base64");
			return;
		}
	} else {
		data = xmalloc(tlen + 1);
		memcpy(data, text, tlen);
		len = tlen;
	}
	struct call_state *st = call_state_new(version);
	struct err e;
	struct ops_call *op =
		ops_write_file(&t, json_string_value(json_object_get(args, "path")), data, len,
			       mode ? (int)json_integer_value(mode) : -1, written, st, &e);
	start_call(c, st, op, &e);
}

static void got_file(struct ops_call *op, const struct ops_result *r, const struct err *err,
		     void *arg)
{
	struct call_state *st = arg;
	if (err && err->errnum == EFBIG && st->at_cap) {
		reply_error(
			st->c,
			"%s: a read_file result is one JSON-RPC message, so it is limited to %zu "
			"bytes (SANDBOX_MCP_MAX_READ_BYTES); read larger files with the REST API "
			"(GET /exec/{sessionId}/read?path=...), which streams them",
			err->msg, api_cfg->mcp_max_read_bytes);
		free(st);
		return;
	}
	if (err) {
		reply_err(st->c, err);
		free(st);
		return;
	}
	json_t *reply = ops_read_json(r, st->want_base64);
	json_object_set_new(reply, "sessionId", json_string(r->session_id));
	reply_ok(st->c, reply, st->version);
	free(st);
}

static void t_read_file(struct mcp_call *c, json_t *args, const char *version)
{
	struct ops_target t = target(c, args);
	const char *encoding = json_string_value(json_object_get(args, "encoding"));
	json_t *maxb = json_object_get(args, "maxBytes");
	size_t cap = api_cfg->mcp_max_read_bytes < api_cfg->max_read_bytes
			     ? api_cfg->mcp_max_read_bytes
			     : api_cfg->max_read_bytes;
	size_t max = maxb ? (size_t)json_integer_value(maxb) : cap;
	if (max > cap)
		max = cap;
	struct call_state *st = call_state_new(version);
	st->at_cap = max == api_cfg->mcp_max_read_bytes;
	st->want_base64 = encoding && strcmp(encoding, "base64") == 0;
	struct err e;
	struct ops_call *op = ops_read_file(&t, json_string_value(json_object_get(args, "path")),
					    max, got_file, st, &e);
	start_call(c, st, op, &e);
}

/* An entry as the output schema says, or NULL when the agent sent something else. */
static json_t *entry_shape(json_t *e)
{
	json_t *path = json_object_get(e, "path");
	json_t *name = json_object_get(e, "name");
	json_t *type = json_object_get(e, "type");
	json_t *size = json_object_get(e, "size");
	json_t *mode = json_object_get(e, "mode");
	json_t *mtime = json_object_get(e, "mtime");
	if (!json_is_string(path) || !json_is_string(name) || !json_is_string(type) ||
	    !json_is_integer(size) || !json_is_integer(mode) || !json_is_number(mtime))
		return NULL;
	const char *t = json_string_value(type);
	if (strcmp(t, "file") && strcmp(t, "dir") && strcmp(t, "symlink") && strcmp(t, "other"))
		t = "other";
	return json_pack("{s:O, s:O, s:s, s:O, s:O, s:O}", "path", path, "name", name, "type", t,
			 "size", size, "mode", mode, "mtime", mtime);
}

static void listed(struct ops_call *op, const struct ops_result *r, const struct err *err,
		   void *arg)
{
	struct call_state *st = arg;
	if (err) {
		reply_err(st->c, err);
		free(st);
		return;
	}
	json_t *files = json_array();
	size_t i;
	json_t *e;
	json_array_foreach (r->entries, i, e) {
		json_t *shaped = entry_shape(e);
		if (shaped)
			json_array_append_new(files, shaped);
	}
	reply_ok(st->c,
		 json_pack("{s:s, s:s, s:o, s:b}", "sessionId", r->session_id, "path", r->path,
			   "files", files, "truncated", r->truncated),
		 st->version);
	free(st);
}

static void t_list_files(struct mcp_call *c, json_t *args, const char *version)
{
	struct ops_target t = target(c, args);
	struct call_state *st = call_state_new(version);
	struct err e;
	struct ops_call *op =
		ops_list_files(&t, json_string_value(json_object_get(args, "path")),
			       json_is_true(json_object_get(args, "recursive")), listed, st, &e);
	start_call(c, st, op, &e);
}

static void stat_done(struct ops_call *op, const struct ops_result *r, const struct err *err,
		      void *arg)
{
	struct call_state *st = arg;
	json_t *shaped = err ? NULL : ops_stat_json(r);
	if (err) {
		reply_err(st->c, err);
	} else if (!shaped) {
		reply_error(st->c, "the sandbox's agent answered a stat with something else");
	} else {
		json_object_set_new(shaped, "sessionId", json_string(r->session_id));
		reply_ok(st->c, shaped, st->version);
	}
	free(st);
}

static void t_stat_path(struct mcp_call *c, json_t *args, const char *version)
{
	struct ops_target t = target(c, args);
	struct call_state *st = call_state_new(version);
	struct err e;
	struct ops_call *op = ops_stat_path(&t, json_string_value(json_object_get(args, "path")),
					    stat_done, st, &e);
	start_call(c, st, op, &e);
}

static void changed(struct ops_call *op, const struct ops_result *r, const struct err *err,
		    void *arg)
{
	struct call_state *st = arg;
	if (err)
		reply_err(st->c, err);
	else
		reply_ok(st->c,
			 json_pack("{s:s, s:s}", "sessionId", r->session_id, "path", r->path),
			 st->version);
	free(st);
}

/* A boolean argument, `def` when absent (the schema has checked its type). */
static bool arg_bool(json_t *args, const char *key, bool def)
{
	json_t *v = json_object_get(args, key);
	return json_is_boolean(v) ? json_is_true(v) : def;
}

static void t_make_directory(struct mcp_call *c, json_t *args, const char *version)
{
	struct ops_target t = target(c, args);
	struct call_state *st = call_state_new(version);
	struct err e;
	struct ops_call *op = ops_make_dir(&t, json_string_value(json_object_get(args, "path")),
					   arg_bool(args, "parents", true), changed, st, &e);
	start_call(c, st, op, &e);
}

static void t_remove_path(struct mcp_call *c, json_t *args, const char *version)
{
	struct ops_target t = target(c, args);
	struct call_state *st = call_state_new(version);
	struct err e;
	struct ops_call *op = ops_remove_path(&t, json_string_value(json_object_get(args, "path")),
					      arg_bool(args, "recursive", false), changed, st, &e);
	start_call(c, st, op, &e);
}

static void moved(struct ops_call *op, const struct ops_result *r, const struct err *err, void *arg)
{
	struct call_state *st = arg;
	json_t *to = err ? NULL : json_object_get(r->info, "path");
	if (err)
		reply_err(st->c, err);
	else
		reply_ok(st->c,
			 json_pack("{s:s, s:s, s:s}", "sessionId", r->session_id, "from", r->path,
				   "to", json_is_string(to) ? json_string_value(to) : ""),
			 st->version);
	free(st);
}

static void t_move_path(struct mcp_call *c, json_t *args, const char *version)
{
	struct ops_target t = target(c, args);
	struct call_state *st = call_state_new(version);
	struct err e;
	struct ops_call *op = ops_move_path(&t, json_string_value(json_object_get(args, "from")),
					    json_string_value(json_object_get(args, "to")),
					    arg_bool(args, "overwrite", true), moved, st, &e);
	start_call(c, st, op, &e);
}

/* --- execute ------------------------------------------------------------------------ */

struct exec_state {
	struct mcp_call *c;
	struct ops_exec *x;
	char version[16];
	struct evbuffer *out[2];
	size_t collected;
	bool truncated;
	uint64_t progress;      /* bytes of output so far: what progress notifications count */
	struct mcp_drain drain; /* held back until the client reads what it was sent */
};

/* Frees st; its wait for the sink to drain is withdrawn first, while its call still has a
 * sink (an answer may end the sink). */
static void exec_state_free(struct exec_state *st)
{
	mcp_call_drain_cancel(st->c, &st->drain);
	evbuffer_free(st->out[0]);
	evbuffer_free(st->out[1]);
	free(st);
}

static void exec_cancel(struct mcp_call *c, void *state)
{
	struct exec_state *st = state;
	mcp_call_drain_cancel(st->c, &st->drain);
	ops_exec_detach(st->x);
	exec_state_free(st);
}

static void progress(struct exec_state *st, const char *text, size_t len, json_t *meta)
{
	json_t *token = mcp_call_progress_token(st->c);
	if (!token) {
		json_decref(meta);
		return;
	}
	json_t *params = json_pack("{s:O, s:I, s:s%}", "progressToken", token, "progress",
				   (json_int_t)st->progress, "message", text, len);
	json_object_set_new(params, "_meta", meta);
	mcp_call_notify(st->c, mcp_notification("notifications/progress", params));
}

static void exec_started(struct ops_exec *x, void *arg)
{
	struct exec_state *st = arg;
	const char *id = ops_exec_id(x);
	char msg[96];
	snprintf(msg, sizeof(msg), "started %s", id);
	progress(st, msg, strlen(msg),
		 json_pack("{s:s, s:s}", "sandbox/execId", id, "sandbox/sessionId",
			   ops_exec_session(x)->id));
}

static void on_drained(struct mcp_drain *d)
{
	struct exec_state *st =
		(struct exec_state *)((char *)d - offsetof(struct exec_state, drain));
	ops_exec_resume(st->x);
}

static void exec_output(struct ops_exec *x, enum ops_stream stream, const char *text, size_t len,
			void *arg)
{
	struct exec_state *st = arg;
	/* Past the limit the output is dropped from the result (the command runs on); the part
	 * that still fits is kept, cut on a character boundary. */
	size_t keep = len;
	if (st->collected + len > api_cfg->max_output_bytes) {
		size_t room = api_cfg->max_output_bytes - st->collected;
		keep = room - utf8_incomplete_tail((const uint8_t *)text, room);
		st->truncated = true;
	}
	evbuffer_add(st->out[stream], text, keep);
	st->collected += keep;
	st->progress += len;
	progress(st, text, len,
		 json_pack("{s:s}", "sandbox/stream", stream == OPS_STDERR ? "stderr" : "stdout"));
	if (mcp_call_pending(st->c) < MCP_HIGH_WATER)
		return;
	ops_exec_pause(x);
	st->drain.fn = on_drained;
	mcp_call_on_drain(st->c, &st->drain);
}

static json_t *buffer_string(struct evbuffer *b)
{
	size_t n = evbuffer_get_length(b);
	return json_stringn(n ? (const char *)evbuffer_pullup(b, -1) : "", n);
}

static void exec_done(struct ops_exec *x, const struct ops_exec_result *r, const struct err *err,
		      void *arg)
{
	struct exec_state *st = arg;
	mcp_call_drain_cancel(st->c, &st->drain);
	if (err) {
		reply_err(st->c, err);
		exec_state_free(st);
		return;
	}
	json_t *out =
		json_pack("{s:s, s:s, s:o, s:o, s:o, s:o, s:f, s:b, s:b, s:b, s:b}", "sessionId",
			  r->session_id, "execId", r->exec_id, "exitCode",
			  r->has_exit_code ? json_integer(r->exit_code) : json_null(), "signal",
			  r->signal ? json_string(r->signal) : json_null(), "stdout",
			  buffer_string(st->out[0]), "stderr", buffer_string(st->out[1]),
			  "durationMs", r->duration_ms, "timedOut", r->timed_out, "cancelled",
			  r->cancelled, "oomKilled", r->oom_killed, "truncated", st->truncated);
	reply_ok(st->c, out, st->version);
	exec_state_free(st);
}

static const struct ops_exec_cbs exec_cbs = { .on_start = exec_started,
					      .on_output = exec_output,
					      .on_done = exec_done };

static void t_execute(struct mcp_call *c, json_t *args, const char *version)
{
	struct ops_target t = target(c, args);
	json_t *timeout = json_object_get(args, "timeout");
	json_t *in = json_object_get(args, "stdin");
	struct ops_exec_req req = {
		.command = json_string_value(json_object_get(args, "command")),
		.args = json_object_get(args, "args"),
		.env = json_object_get(args, "env"),
		.cwd = json_string_value(json_object_get(args, "cwd")),
		.user = json_string_value(json_object_get(args, "user")),
		.timeout_ms = timeout ? (uint64_t)json_integer_value(timeout) : 0,
		.has_timeout = timeout != NULL,
		.stdin_data = json_string_value(in),
		.stdin_len = json_string_length(in),
		.has_stdin = in != NULL,
	};
	struct exec_state *st = xcalloc(1, sizeof(*st));
	st->c = c;
	snprintf(st->version, sizeof(st->version), "%s", version);
	st->out[0] = evbuffer_new();
	st->out[1] = evbuffer_new();
	struct err e;
	st->x = ops_execute(&t, &req, &exec_cbs, st, &e);
	if (!st->x) {
		exec_state_free(st);
		reply_err(c, &e);
		return;
	}
	struct mcp_tool_run run = { .cancel = exec_cancel, .state = st };
	mcp_call_set_run(c, &run);
}

/* --- background processes ----------------------------------------------------------- */

/* A process as PROCESS_SHAPE says (ops has checked the agent's object field by field). */
static json_t *process_shape(json_t *p)
{
	static const char *const keys[] = { "pid",      "tag",        "command", "argv",
					    "cwd",      "pty",        "state",   "startedAt",
					    "endedAt",  "exitCode",   "signal",  "durationMs",
					    "timedOut", "outputBytes" };
	json_t *j = json_object();
	for (size_t i = 0; i < ARRAY_SIZE(keys); i++) {
		json_t *v = json_object_get(p, keys[i]);
		json_object_set(j, keys[i], v ? v : json_null());
	}
	return j;
}

/* The `ref` argument (a pid or a tag, as the schema allows) into buf and ref. */
static int proc_ref(json_t *args, char *buf, size_t size, struct ops_proc_ref *ref, struct err *err)
{
	json_t *v = json_object_get(args, "ref");
	if (json_is_integer(v))
		snprintf(buf, size, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
	else
		snprintf(buf, size, "%s", json_string_value(v));
	return ops_proc_ref_parse(buf, ref, err);
}

static void proc_started(struct ops_call *op, const struct ops_result *r, const struct err *err,
			 void *arg)
{
	struct call_state *st = arg;
	if (err)
		reply_err(st->c, err);
	else
		reply_ok(st->c,
			 json_pack("{s:s, s:o}", "sessionId", r->session_id, "process",
				   process_shape(r->info)),
			 st->version);
	free(st);
}

static void t_start_process(struct mcp_call *c, json_t *args, const char *version)
{
	struct ops_target t = target(c, args);
	json_t *timeout = json_object_get(args, "timeout");
	json_t *pty = json_object_get(args, "pty");
	struct ops_spawn_req req = {
		.x = { .command = json_string_value(json_object_get(args, "command")),
		       .args = json_object_get(args, "args"),
		       .env = json_object_get(args, "env"),
		       .cwd = json_string_value(json_object_get(args, "cwd")),
		       .user = json_string_value(json_object_get(args, "user")),
		       .timeout_ms = timeout ? (uint64_t)json_integer_value(timeout) : 0,
		       .has_timeout = true },
		.tag = json_string_value(json_object_get(args, "tag")),
		.stdin_open = arg_bool(args, "stdin", false),
		.pty = pty != NULL,
	};
	if (pty) {
		json_t *rows = json_object_get(pty, "rows"), *cols = json_object_get(pty, "cols");
		req.rows = rows ? (unsigned)json_integer_value(rows) : 24;
		req.cols = cols ? (unsigned)json_integer_value(cols) : 80;
	}
	struct call_state *st = call_state_new(version);
	struct err e;
	struct ops_call *op = ops_spawn(&t, &req, proc_started, st, &e);
	start_call(c, st, op, &e);
}

static void procs_listed(struct ops_call *op, const struct ops_result *r, const struct err *err,
			 void *arg)
{
	struct call_state *st = arg;
	if (err) {
		reply_err(st->c, err);
		free(st);
		return;
	}
	json_t *list = json_array();
	size_t i;
	json_t *p;
	json_array_foreach (r->entries, i, p)
		json_array_append_new(list, process_shape(p));
	reply_ok(st->c,
		 json_pack("{s:s, s:o, s:i}", "sessionId", r->session_id, "processes", list,
			   "count", (int)json_array_size(list)),
		 st->version);
	free(st);
}

static void t_list_processes(struct mcp_call *c, json_t *args, const char *version)
{
	struct ops_target t = target(c, args);
	struct call_state *st = call_state_new(version);
	struct err e;
	struct ops_call *op = ops_list_processes(&t, procs_listed, st, &e);
	start_call(c, st, op, &e);
}

/* read_process_output: an attach that collects up to SANDBOX_MCP_MAX_READ_BYTES of output,
 * following the process for up to waitMs. When the wait is over first, the attach ends and
 * a second one, which sends nothing, tells the process's state. */
struct read_state {
	struct mcp_call *c;
	struct ops_call *op;
	char version[16];
	char ref_buf[72];
	struct ops_proc_ref ref;
	struct ops_target t;
	char session_id[160];
	struct evbuffer *out[2];
	size_t collected;
	bool truncated;
	bool want_all; /* no replayBytes under the cap: all that is kept is asked for */
	uint64_t gaps;
	struct event *timer;
};

static void read_state_free(struct read_state *st)
{
	if (st->timer)
		event_free(st->timer);
	evbuffer_free(st->out[0]);
	evbuffer_free(st->out[1]);
	free(st);
}

static void read_cancel(struct mcp_call *c, void *state)
{
	struct read_state *st = state;
	if (st->op)
		ops_call_detach(st->op);
	read_state_free(st);
}

static void read_output(struct ops_call *op, enum ops_stream stream, const uint8_t *data,
			size_t len, void *arg)
{
	struct read_state *st = arg;
	size_t keep = len;
	if (st->collected + len > api_cfg->mcp_max_read_bytes) {
		keep = api_cfg->mcp_max_read_bytes - st->collected;
		st->truncated = true;
	}
	evbuffer_add(st->out[stream == OPS_STDERR], data, keep);
	st->collected += keep;
	ops_call_consumed(op, len); /* held here, not by a client: the agent may send on */
}

static void read_gap(struct ops_call *op, uint64_t bytes, void *arg)
{
	struct read_state *st = arg;
	st->gaps += bytes;
}

static json_t *read_text(struct evbuffer *b)
{
	size_t n = evbuffer_get_length(b), tlen;
	_cleanup_free_ char *text =
		utf8_sanitize(n ? evbuffer_pullup(b, -1) : (const uint8_t *)"", n, &tlen);
	return json_stringn(text, tlen);
}

static void read_done(struct ops_call *op, const struct ops_result *r, const struct err *err,
		      void *arg)
{
	struct read_state *st = arg;
	st->op = NULL;
	/* More is kept than this answer holds: the replay was cut at the cap. */
	json_int_t kept =
		err ? 0
		    : json_integer_value(json_object_get(r->info, "outputBytes")) -
				json_integer_value(json_object_get(r->info, "replayFrom"));
	if (st->want_all && kept > (json_int_t)st->collected)
		st->truncated = true;
	if (err)
		reply_err(st->c, err);
	else
		reply_ok(st->c,
			 json_pack("{s:s, s:o, s:o, s:o, s:I, s:b}", "sessionId", r->session_id,
				   "process", process_shape(r->info), "stdout",
				   read_text(st->out[0]), "stderr", read_text(st->out[1]),
				   "gapBytes", (json_int_t)st->gaps, "truncated", st->truncated),
			 st->version);
	read_state_free(st);
}

static void read_ignore(struct ops_call *op, enum ops_stream stream, const uint8_t *data,
			size_t len, void *arg)
{
	ops_call_consumed(op, len);
}

static const struct ops_attach_cbs read_cbs = { .on_output = read_output, .on_gap = read_gap };
static const struct ops_attach_cbs state_cbs = { .on_output = read_ignore };

static void read_waited(evutil_socket_t fd, short what, void *arg)
{
	struct read_state *st = arg;
	if (!st->op)
		return;
	ops_call_detach(st->op);
	/* The call's arguments are gone by now: the session's id was kept. */
	st->t.session_id = st->session_id;
	st->t.template_name = NULL;
	struct ops_attach_opts o = { .replay_bytes = 0, .output = false, .follow = false };
	struct err e;
	st->op = ops_attach(&st->t, &st->ref, &o, &state_cbs, read_done, st, &e);
	if (!st->op) {
		reply_err(st->c, &e);
		read_state_free(st);
	}
}

static void t_read_process_output(struct mcp_call *c, json_t *args, const char *version)
{
	struct read_state *st = xcalloc(1, sizeof(*st));
	struct err e;
	if (proc_ref(args, st->ref_buf, sizeof(st->ref_buf), &st->ref, &e) < 0) {
		free(st);
		reply_err(c, &e);
		return;
	}
	st->c = c;
	snprintf(st->version, sizeof(st->version), "%s", version);
	st->t = target(c, args);
	snprintf(st->session_id, sizeof(st->session_id), "%s", st->t.session_id);
	st->out[0] = evbuffer_new();
	st->out[1] = evbuffer_new();
	json_t *replay = json_object_get(args, "replayBytes");
	json_t *wait = json_object_get(args, "waitMs");
	int64_t cap = (int64_t)api_cfg->mcp_max_read_bytes;
	int64_t want = replay ? (int64_t)json_integer_value(replay) : cap;
	st->want_all = want >= cap;
	int64_t wait_ms = wait ? (int64_t)json_integer_value(wait) : 0;
	struct ops_attach_opts o = {
		.replay_bytes = want < cap ? want : cap,
		.output = true,
		.follow = wait_ms > 0,
	};
	st->op = ops_attach(&st->t, &st->ref, &o, &read_cbs, read_done, st, &e);
	if (!st->op) {
		read_state_free(st);
		reply_err(c, &e);
		return;
	}
	if (wait_ms > 0) {
		st->timer = evtimer_new(api_base, read_waited, st);
		struct timeval tv = { (time_t)(wait_ms / 1000),
				      (suseconds_t)(wait_ms % 1000) * 1000 };
		evtimer_add(st->timer, &tv);
	}
	struct mcp_tool_run run = { .cancel = read_cancel, .state = st };
	mcp_call_set_run(c, &run);
}

struct input_state {
	struct call_state base; /* first: start_call frees it as a call_state */
	char ref[72];
};

static void input_done(struct ops_call *op, const struct ops_result *r, const struct err *err,
		       void *arg)
{
	struct input_state *st = arg;
	json_t *bytes = err ? NULL : json_object_get(r->info, "bytes");
	if (err)
		reply_err(st->base.c, err);
	else
		reply_ok(st->base.c,
			 json_pack("{s:s, s:s, s:I, s:b}", "sessionId", r->session_id, "ref",
				   st->ref, "bytes",
				   (json_int_t)(json_is_integer(bytes) ? json_integer_value(bytes)
								       : 0),
				   "closed", json_is_true(json_object_get(r->info, "closed"))),
			 st->base.version);
	free(st);
}

static void t_send_process_input(struct mcp_call *c, json_t *args, const char *version)
{
	struct input_state *st = xcalloc(1, sizeof(*st));
	snprintf(st->base.version, sizeof(st->base.version), "%s", version);
	struct ops_proc_ref ref;
	struct err e;
	if (proc_ref(args, st->ref, sizeof(st->ref), &ref, &e) < 0) {
		free(st);
		reply_err(c, &e);
		return;
	}
	json_t *d = json_object_get(args, "data");
	const char *encoding = json_string_value(json_object_get(args, "encoding"));
	const char *text = d ? json_string_value(d) : "";
	size_t tlen = d ? json_string_length(d) : 0;
	bool close = arg_bool(args, "close", false);
	uint8_t *data;
	size_t len;
	if (encoding && strcmp(encoding, "base64") == 0) {
		if (base64_decode(text, tlen, &data, &len) < 0) {
			free(st);
			reply_error(c, "data is not valid base64");
			return;
		}
	} else {
		data = xmalloc(tlen + 1);
		memcpy(data, text, tlen);
		len = tlen;
	}
	if (!len && !close) {
		free(data);
		free(st);
		reply_error(c, "nothing to send: give data or close: true");
		return;
	}
	struct ops_target t = target(c, args);
	struct ops_call *op = ops_process_input(&t, &ref, data, len, close, input_done, st, &e);
	start_call(c, &st->base, op, &e);
}

struct signal_state {
	struct call_state base; /* first: start_call frees it as a call_state */
	char ref[72];
	int sig;
};

static void signalled(struct ops_call *op, const struct ops_result *r, const struct err *err,
		      void *arg)
{
	struct signal_state *st = arg;
	if (err)
		reply_err(st->base.c, err);
	else
		reply_ok(st->base.c,
			 json_pack("{s:s, s:s, s:i, s:b}", "sessionId", r->session_id, "ref",
				   st->ref, "signal", st->sig, "signalled", 1),
			 st->base.version);
	free(st);
}

static void t_signal_process(struct mcp_call *c, json_t *args, const char *version)
{
	struct signal_state *st = xcalloc(1, sizeof(*st));
	snprintf(st->base.version, sizeof(st->base.version), "%s", version);
	struct ops_proc_ref ref;
	struct err e;
	if (proc_ref(args, st->ref, sizeof(st->ref), &ref, &e) < 0) {
		free(st);
		reply_err(c, &e);
		return;
	}
	json_t *v = json_object_get(args, "signal");
	st->sig = json_is_integer(v) ? (int)json_integer_value(v)
				     : signal_from_name(json_string_value(v));
	if (st->sig < 0) {
		free(st);
		reply_error(c,
			    "unknown signal `%.16s`: give TERM, KILL, INT, HUP, QUIT, USR1, "
			    "USR2, CONT, STOP, TSTP, WINCH, ALRM or a number",
			    json_string_value(v));
		return;
	}
	struct ops_target t = target(c, args);
	struct ops_call *op = ops_signal_process(&t, &ref, st->sig, signalled, st, &e);
	start_call(c, &st->base, op, &e);
}

/* --- dispatch ----------------------------------------------------------------------- */

void mcp_tool_call(struct mcp_call *c, const char *name, json_t *args, const char *version)
{
	load_schemas();
	struct tool *t = tool_find(name);
	struct err e;
	/* Input that does not fit the schema is a tool error (the model can correct it), not a
	 * protocol error. */
	if (mcp_schema_check(t->in_schema, args, "arguments", &e) < 0) {
		reply_error(c, "Invalid arguments for %s: %s", name, e.msg);
		return;
	}
	t->fn(c, args, version);
}

/* --- wait_for_change ---------------------------------------------------------------- */

struct wait_state {
	struct mcp_call *c;
	struct ops_watch *w;
	char version[16];
	char *session_id;
	char *path;
	json_t *events;
	struct event *batch; /* WAIT_BATCH_MS after the first event */
	bool replied;
};

static void wait_free(struct wait_state *st)
{
	if (st->batch)
		event_free(st->batch);
	json_decref(st->events);
	free(st->session_id);
	free(st->path);
	free(st);
}

static void wait_on_batch(evutil_socket_t fd, short what, void *arg)
{
	struct wait_state *st = arg;
	ops_watch_cancel(st->w); /* the RESULT ends it: wait_on_done replies */
}

static void wait_on_event(struct ops_watch *w, json_t *event, void *arg)
{
	struct wait_state *st = arg;
	if (json_array_size(st->events) < WAIT_MAX_EVENTS)
		json_array_append(st->events, event);
	if (!st->batch) {
		st->batch = evtimer_new(api_base, wait_on_batch, st);
		struct timeval tv = { 0, WAIT_BATCH_MS * 1000 };
		evtimer_add(st->batch, &tv);
	}
	if (json_array_size(st->events) >= WAIT_MAX_EVENTS)
		ops_watch_cancel(w);
}

static void wait_on_done(struct ops_watch *w, const struct ops_watch_result *r,
			 const struct err *err, void *arg)
{
	struct wait_state *st = arg;
	if (err && json_array_size(st->events) == 0) {
		reply_err(st->c, err);
	} else {
		json_t *j = json_pack("{s:s, s:s, s:O, s:b}", "sessionId", st->session_id, "path",
				      st->path, "events", st->events, "timedOut",
				      json_array_size(st->events) == 0);
		reply_ok(st->c, j, st->version);
	}
	wait_free(st);
}

static const struct ops_watch_cbs wait_cbs = { .on_event = wait_on_event, .on_done = wait_on_done };

static void wait_cancel(struct mcp_call *c, void *state)
{
	struct wait_state *st = state;
	ops_watch_detach(st->w);
	wait_free(st);
}

static void t_wait_for_change(struct mcp_call *c, json_t *args, const char *version)
{
	struct ops_target t = target(c, args);
	json_t *tv = json_object_get(args, "timeoutMs");
	struct ops_watch_req req = {
		.path = json_string_value(json_object_get(args, "path")),
		.recursive = json_is_true(json_object_get(args, "recursive")),
		.timeout_ms = tv ? (uint64_t)json_integer_value(tv) : WAIT_DEFAULT_MS,
	};
	struct wait_state *st = xcalloc(1, sizeof(*st));
	snprintf(st->version, sizeof(st->version), "%s", version);
	st->c = c;
	st->session_id = xstrdup(t.session_id);
	st->path = xstrdup(req.path);
	st->events = json_array();
	struct err e;
	st->w = ops_watch(&t, &req, &wait_cbs, st, &e);
	if (!st->w) {
		wait_free(st);
		reply_err(c, &e);
		return;
	}
	struct mcp_tool_run run = { .cancel = wait_cancel, .state = st };
	mcp_call_set_run(c, &run);
}

/* --- ports and previews ------------------------------------------------------------- */

struct ports_state {
	struct call_state cs; /* first: call_state_cancel frees it */
	unsigned port;        /* get_preview_url's; 0 for list_ports */
	bool share;
	char owner[64];
	char sid[160];
};

/* A preview URL template (with "{port}", api_preview_json()) for one port. */
static json_t *url_for(const char *tpl, unsigned port)
{
	char num[12];
	snprintf(num, sizeof(num), "%u", port);
	struct evbuffer *b = evbuffer_new();
	for (const char *p = tpl ? tpl : ""; *p;) {
		if (strncmp(p, "{port}", 6) == 0) {
			evbuffer_add(b, num, strlen(num));
			p += 6;
		} else {
			evbuffer_add(b, p++, 1);
		}
	}
	size_t n = evbuffer_get_length(b);
	json_t *j = json_stringn(n ? (const char *)evbuffer_pullup(b, -1) : "", n);
	evbuffer_free(b);
	return j;
}

static void ports_listed(struct ops_call *op, const struct ops_result *r, const struct err *err,
			 void *arg)
{
	struct ports_state *st = arg;
	struct mcp_call *c = st->cs.c;
	if (err) {
		reply_err(c, err);
		free(st);
		return;
	}
	/* The session may have gone while its agent answered. */
	struct ops_target t = { .owner = st->owner, .session_id = st->sid };
	struct err e;
	struct session *s = ops_find_session(&t, &e);
	if (!s) {
		reply_err(c, &e);
		free(st);
		return;
	}
	json_auto_t *pv = api_preview_json(s, st->share);
	const char *url = json_string_value(json_object_get(pv, "url"));
	const char *path = json_string_value(json_object_get(pv, "pathUrl"));
	json_t *list = json_array();
	bool listening = false;
	size_t i;
	json_t *p;
	json_array_foreach (r->entries, i, p) {
		unsigned port = (unsigned)json_integer_value(json_object_get(p, "port"));
		const char *addr = json_string_value(json_object_get(p, "address"));
		listening |= port == st->port;
		json_array_append_new(list,
				      json_pack("{s:i, s:s, s:o, s:o, s:b}", "port", (int)port,
						"address", addr ? addr : "", "url",
						url_for(url, port), "pathUrl", url_for(path, port),
						"public", session_port_public(s, port)));
	}
	json_t *out;
	if (!st->port) {
		out = json_pack("{s:s, s:o, s:b}", "sessionId", st->sid, "ports", list, "truncated",
				r->truncated);
	} else {
		json_decref(list);
		out = json_pack("{s:s, s:i, s:o, s:o, s:b, s:b}", "sessionId", st->sid, "port",
				(int)st->port, "url", url_for(url, st->port), "pathUrl",
				url_for(path, st->port), "public", session_port_public(s, st->port),
				"listening", listening || r->truncated);
		const char *token = json_string_value(json_object_get(pv, "token"));
		if (st->share && token) {
			json_auto_t *u = url_for(url, st->port);
			char share[1024];
			snprintf(share, sizeof(share), "%s%ssandbox_token=%s", json_string_value(u),
				 strchr(json_string_value(u), '?') ? "&" : "?", token);
			json_object_set_new(out, "shareUrl", json_string(share));
		}
	}
	reply_ok(c, out, st->cs.version);
	free(st);
}

static void start_ports(struct mcp_call *c, json_t *args, const char *version, unsigned port,
			bool share)
{
	struct ops_target t = target(c, args);
	struct ports_state *st = xcalloc(1, sizeof(*st));
	snprintf(st->cs.version, sizeof(st->cs.version), "%s", version);
	snprintf(st->owner, sizeof(st->owner), "%s", t.owner ? t.owner : "");
	snprintf(st->sid, sizeof(st->sid), "%s", t.session_id);
	st->port = port;
	st->share = share;
	struct err e;
	struct ops_call *op = ops_list_ports(&t, ports_listed, st, &e);
	start_call(c, &st->cs, op, &e);
}

static void t_list_ports(struct mcp_call *c, json_t *args, const char *version)
{
	start_ports(c, args, version, 0, false);
}

static void t_get_preview_url(struct mcp_call *c, json_t *args, const char *version)
{
	start_ports(c, args, version, (unsigned)json_integer_value(json_object_get(args, "port")),
		    arg_bool(args, "share", false));
}
