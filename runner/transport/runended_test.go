package transport

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	curev1 "github.com/cure-oss/cure/api/curev1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// endedCoordinator answers every Hello as the coordinator answers the boot
// of an ended run (or, with plain, a FailedPrecondition without the detail).
type endedCoordinator struct {
	curev1.UnimplementedRunnerServiceServer
	plain  bool
	hellos atomic.Int32
}

func (c *endedCoordinator) Session(stream grpc.BidiStreamingServer[curev1.RunnerMessage, curev1.CoordinatorMessage]) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	c.hellos.Add(1)
	st := status.New(codes.FailedPrecondition, "run r1 has ended (succeeded)")
	if !c.plain {
		var err error
		if st, err = st.WithDetails(&curev1.RunEnded{RunId: "r1", NodeId: "node1", Status: "succeeded"}); err != nil {
			return err
		}
	}
	return st.Err()
}

// setupServer serves srv over an in-memory listener.
func setupServer(t *testing.T, srv curev1.RunnerServiceServer) *grpc.ClientConn {
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	curev1.RegisterRunnerServiceServer(gs, srv)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// A runner told its run ended stops dialling at once (the coordinator
// would only refuse it again); any other refusal is retried as before.
func TestRunEndedStopsDialling(t *testing.T) {
	c := &endedCoordinator{}
	sess := NewSession(setupServer(t, c), func() *curev1.Hello { return &curev1.Hello{Token: "t", BootId: "b"} },
		SessionOptions{BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, Log: quiet()})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sess.Run(ctx); !errors.Is(err, ErrRunEnded) {
		t.Fatalf("Run = %v, want ErrRunEnded", err)
	}
	if n := c.hellos.Load(); n != 1 {
		t.Errorf("%d Hellos, want one", n)
	}

	plain := &endedCoordinator{plain: true}
	sess = NewSession(setupServer(t, plain), func() *curev1.Hello { return &curev1.Hello{Token: "t", BootId: "b"} },
		SessionOptions{BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, Log: quiet()})
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := sess.Run(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run against a plain FailedPrecondition = %v, want it dialling until ctx ends", err)
	}
	if n := plain.hellos.Load(); n < 3 {
		t.Errorf("%d Hellos without the RunEnded detail, want the runner to keep dialling", n)
	}
}
