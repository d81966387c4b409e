module realgo

go 1.19
