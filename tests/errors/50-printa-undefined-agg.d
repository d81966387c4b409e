/* expect: undefined aggregation: @b @ 2:16 */
BEGIN { printa(@b); }
