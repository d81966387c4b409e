/* expect: scalar 'execname' may not be referenced as a function @ 2:9 */
BEGIN { execname(); }
