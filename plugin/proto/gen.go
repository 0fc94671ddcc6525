// Package proto is the collplan tuner plugin protocol (tuner.proto) and its generated Go code. The
// generated files are committed: building needs no protoc. To regenerate after editing
// tuner.proto (which must stay wire compatible; see its header), install the generators at the
// versions the header of tuner.pb.go names and run go generate:
//
//	apt-get install -y protobuf-compiler        # protoc 3.21
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
//	go generate ./plugin/proto
package proto

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative tuner.proto
