module overworld/loadgen

go 1.19
