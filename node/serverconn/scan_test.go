package serverconn

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// The byte scan calls a message a notification only when it surely is one: a
// response or a request (an id, escaped or not) is never taken for one, and a
// notification whose keys are escaped is left for the decoder to judge.
func TestPlainNotification(t *testing.T) {
	for msg, want := range map[string]bool{
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}`: true,
		`{"method":"notifications/message","params":{"id":3,"data":"{\"id\":1}"},"jsonrpc":"2.0"}`:        true,
		`{"jsonrpc":"2.0","method":"ping","id":1}`:                                                        false,
		`{"jsonrpc":"2.0","id":1,"result":{"method":"x"}}`:                                                false,
		`{"jsonrpc":"2.0","i\u0064":1,"method":"roots/list"}`:                                             false,
		`{"jsonrpc":"2.0","m\u0065thod":"notifications/progress"}`:                                        false,
		`{"jsonrpc":"2.0","result":{},"id":"a\"b"}`:                                                       false,
		`[{"jsonrpc":"2.0","method":"notifications/progress"}]`:                                           false,
		`{"jsonrpc":"2.0","params":{"method":"x"}}`:                                                       false,
	} {
		if got := ScanTop([]byte(msg)).Notification(); got != want {
			t.Errorf("Notification(%s) = %v, want %v", msg, got, want)
		}
	}
}

// The scan reads a response's id as the decoder does, or leaves the message to
// the decoder: escaped keys or ids, case variants of "id" and "method", ids that
// are null, fractions or too long, and anything not a whole object.
func TestPlainResponseID(t *testing.T) {
	num := func(v float64) jsonrpc.ID { id, _ := jsonrpc.MakeID(v); return id }
	str := func(v string) jsonrpc.ID { id, _ := jsonrpc.MakeID(v); return id }
	for msg, want := range map[string]*jsonrpc.ID{
		`{"jsonrpc":"2.0","id":7,"result":{}}`:                          ptr(num(7)),
		`{"result":{"id":3,"method":"x"},"jsonrpc":"2.0", "id" : -12 }`: ptr(num(-12)),
		`{"jsonrpc":"2.0","id":"s-1","error":{"code":1,"message":"m"}}`: ptr(str("s-1")),
		`{"jsonrpc":"2.0","id":"a\"b","result":{}}`:                     nil,
		`{"jsonrpc":"2.0","i\u0064":7,"result":{}}`:                     nil,
		`{"jsonrpc":"2.0","id":7,"ID":8,"result":{}}`:                   nil,
		`{"jsonrpc":"2.0","id":7,"Method":"roots/list"}`:                nil,
		`{"jsonrpc":"2.0","id":7,"method":"roots/list"}`:                nil,
		`{"jsonrpc":"2.0","id":null,"result":{}}`:                       nil,
		`{"jsonrpc":"2.0","id":7.5,"result":{}}`:                        nil,
		`{"jsonrpc":"2.0","id":1e3,"result":{}}`:                        nil,
		`{"jsonrpc":"2.0","id":1234567890123456789,"result":{}}`:        nil,
		`[{"jsonrpc":"2.0","id":7,"result":{}}]`:                        nil,
		`{"jsonrpc":"2.0","id":7,"result":{}`:                           nil,
	} {
		got, ok := ScanTop([]byte(msg)).ResponseID()
		if want == nil {
			if ok {
				t.Errorf("ResponseID(%s) = %v, want it left to the decoder", msg, got.Raw())
			}
			continue
		}
		if !ok || got != *want {
			t.Errorf("ResponseID(%s) = %v %v, want %v", msg, got.Raw(), ok, want.Raw())
		}
		dec, err := jsonrpc.DecodeMessage([]byte(msg))
		if r, isResp := dec.(*jsonrpc.Response); err != nil || !isResp || r.ID != got {
			t.Errorf("the decoder reads %s as %#v (%v), not a response with id %v", msg, dec, err, got.Raw())
		}
	}
	for msg, want := range map[string]bool{
		`{"x":1}`:                      true,
		`not json`:                     true,
		`["a"]`:                        true,
		`{"jsonrpc":"2.0","result":1}`: true,
		`{"jsonrpc":"2.0","Id":1}`:     false,
		`{"jsonrpc":"2.0","id":1}`:     false,
		`{"m\u0065thod":"x"}`:          false,
		`{"method":"x"}`:               false,
	} {
		if got := ScanTop([]byte(msg)).NoMessage(); got != want {
			t.Errorf("NoMessage(%s) = %v, want %v", msg, got, want)
		}
	}
}

func ptr[T any](v T) *T { return &v }
