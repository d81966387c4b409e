/* expect: macro argument $1 is not defined @ 2:15 */
BEGIN { trace($1); }
