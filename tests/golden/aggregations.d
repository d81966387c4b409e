/*
 * Every aggregating function, keyed and unkeyed, printed by default at exit.
 * Expected output (-q): tests/golden/aggregations.out. Aggregations print in the
 * order of their first use, each sorted by value, ties by key.
 * The .out file was checked line by line against dt_consume.c's formats and
 * dt_aggregate.c's ordering; never regenerate it from udtrace's own output.
 */
BEGIN
{
	/* quantize: negative values, zero, powers of two and a large value */
	@q = quantize(-6);	/* bucket -4 holds -7..-4 */
	@q = quantize(-1);
	@q = quantize(0);
	@q = quantize(1);
	@q = quantize(3);
	@q = quantize(3);
	@q = quantize(1000);	/* bucket 512 */

	/* lquantize: below the base, inside, and at and above the limit */
	@lq = lquantize(-5, 0, 100, 10);
	@lq = lquantize(0, 0, 100, 10);
	@lq = lquantize(15, 0, 100, 10);
	@lq = lquantize(15, 0, 100, 10);
	@lq = lquantize(99, 0, 100, 10);
	@lq = lquantize(100, 0, 100, 10);
	@lq = lquantize(250, 0, 100, 10);

	/* llquantize: one key at the bottom of the range, one over the top */
	@llq["lo"] = llquantize(0, 10, 0, 6, 20);
	@llq["lo"] = llquantize(3, 10, 0, 6, 20);
	@llq["lo"] = llquantize(12, 10, 0, 6, 20);
	@llq["lo"] = llquantize(14, 10, 0, 6, 20);
	@llq["hi"] = llquantize(5000000, 10, 0, 6, 20);
	@llq["hi"] = llquantize(12000000, 10, 0, 6, 20);

	/* unkeyed scalars */
	@c = count(); @c = count(); @c = count();
	@s = sum(-7); @s = sum(2);
	@a = avg(1); @a = avg(2); @a = avg(4);
	@an = avg(-1); @an = avg(-2);
	@mn = min(3); @mn = min(-9);
	@mx = max(3); @mx = max(-9);
	@sd = stddev(2); @sd = stddev(4); @sd = stddev(4); @sd = stddev(4);
	@sd = stddev(5); @sd = stddev(5); @sd = stddev(7); @sd = stddev(9);

	/* keyed: strings, ints of each size, several keys */
	@bystr["sed"] = count(); @bystr["cat"] = count(); @bystr["sed"] = count();
	@bystr["awk"] = count(); @bystr["cat"] = count(); @bystr["sed"] = count();
	@byint[1] = sum(10); @byint[-1] = sum(10); @byint[300] = sum(-4);
	@bychar[(char)65] = max(7);
	@byshort[(short)-2] = min(5);
	@bylong[(long long)1 << 40] = min(-3);
	@multi["read", 3] = sum(100);
	@multi["read", 1] = sum(100);
	@multi["write", 2] = sum(50);
	@multi["a", 9] = sum(75);
	exit(0);
}
