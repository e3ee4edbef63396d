/*
 * commands.h -- the subcommands of the loopscope CLI, one file each.
 * Each takes the command's own argv (argv[0] is the command name) and
 * returns the process exit status.
 */
#ifndef LOOPSCOPE_COMMANDS_H
#define LOOPSCOPE_COMMANDS_H

#endif
