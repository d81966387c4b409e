/* expect: @a must be assigned the result of an aggregating function @ 2:14 */
BEGIN { @a = 1; }
