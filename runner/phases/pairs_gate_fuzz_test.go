package phases

import (
	"bytes"
	"io"
	"net"
	"testing"
)

// rw reads the hostile bytes and keeps what is written.
type rw struct {
	io.Reader
	bytes.Buffer
}

func (x *rw) Read(p []byte) (int, error)  { return x.Reader.Read(p) }
func (x *rw) Write(p []byte) (int, error) { return x.Buffer.Write(p) }

// FuzzPairGateHandshake: whatever bytes a peer sends, the server's end
// admits only the proof the secret gives for its nonce and addresses, and
// the client's end accepts only a gate's hello followed by its admission;
// neither panics.
func FuzzPairGateHandshake(f *testing.F) {
	secret := bytes.Repeat([]byte{7}, 32)
	nonce := bytes.Repeat([]byte{3}, gateNonceSize)
	client, server := net.ParseIP("10.0.0.2"), net.ParseIP("10.0.0.1")
	good := gateProof(secret, nonce, client, server, 5301)
	f.Add(good)
	f.Add(append(append(append([]byte{}, gateMagic...), nonce...), gateAdmitted))
	f.Add([]byte("CURE-PAIR-GATE1\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		admitted := false
		err := checkProof(bytes.NewReader(data), secret, nonce, client, server, 5301, func() error { admitted = true; return nil })
		if (err == nil) != admitted {
			t.Fatalf("err %v but admitted %v", err, admitted)
		}
		if admitted && !bytes.Equal(data[:gateProofSize], good) {
			t.Fatalf("admitted %x without the proof", data[:gateProofSize])
		}
		x := &rw{Reader: bytes.NewReader(data)}
		if err := answerGate(x, secret, client, server, 5301); err == nil {
			n := len(gateMagic) + gateNonceSize
			if len(data) <= n || !bytes.Equal(data[:len(gateMagic)], gateMagic) || data[n] != gateAdmitted {
				t.Fatalf("accepted %x as a gate's hello and admission", data)
			}
			if want := gateProof(secret, data[len(gateMagic):n], client, server, 5301); !bytes.Equal(x.Buffer.Bytes(), want) {
				t.Fatalf("answered %x, want the proof %x", x.Buffer.Bytes(), want)
			}
		}
	})
}
