/* expect: aggregation redefined: @a\n\t current: @a = sum( )\n\tprevious: @a = count( ) : line 2 @ 3:12 */
BEGIN { @a = count(); }
END { @a = sum(1); }
