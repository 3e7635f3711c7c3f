package googleclients

// The hand-written clients whose methods no generated client of Clients
// calls (Bigtable's data API, Storage's gRPC API): linked so that their
// descriptors are registered, for the safety Generate reads of them.
import (
	_ "cloud.google.com/go/bigtable"
	_ "cloud.google.com/go/storage"
)
