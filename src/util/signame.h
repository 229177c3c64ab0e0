/* signame: the signals the API lets a client send, by name. */
#pragma once

/* "TERM", "SIGTERM", "term"... to the signal's number, or -1 for a name not in the list
 * (HUP, INT, QUIT, KILL, USR1, USR2, TERM, CONT, STOP, TSTP, WINCH, ALRM). */
int signal_from_name(const char *name);
