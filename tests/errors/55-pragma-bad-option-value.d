/* expect: failed to set option 'bufsize' to 'lots': Invalid value for specified option @ 2:1 */
#pragma D option bufsize=lots
BEGIN { exit(0); }
