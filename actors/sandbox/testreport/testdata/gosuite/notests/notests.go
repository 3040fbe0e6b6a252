package notests

func Nothing() {}
