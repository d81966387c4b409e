/* expect: syntax error near "/" @ 2:15 */
BEGIN /pid == / { }
