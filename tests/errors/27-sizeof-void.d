/* expect: cannot apply sizeof to an operand of unknown size @ 2:13 */
BEGIN { x = sizeof(void); }
