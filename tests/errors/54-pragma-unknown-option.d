/* expect: failed to set option 'nosuchopt': Invalid option name @ 2:1 */
#pragma D option nosuchopt
BEGIN { exit(0); }
